#!/usr/bin/python3
"""Speed of constrained decoding (issue 26): decode tok/s of JSON-schema-constrained requests
beside free ones on the same server, in one run, alternating, at batch 1 and batch 16 (n=16
choices of one request). The constrained schema keeps the model inside one long string (a free
walk of tokens), so every step pays for a mask over the whole vocabulary; the free requests
ignore EOS so both sides generate the same number of tokens.

With --jump-forward: a schema of fixed keys and short bounded values, on two servers side by
side (one started with --no-jump-forward), alternating requests with the same seeds; reports
the seconds per finished object and the ratio (jump-forward's speed-up).

Usage: /usr/bin/python3 benchmarks/structured_speed.py [--model models/Llama-3.2-1B-Instruct]
         [--tokens 64] [--rounds 3] [--report FILE] [--jump-forward]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from structured_validity import ROOT, post, start_server  # noqa: E402

SCHEMAS = {
    # one long free string: every step masks the whole vocabulary at one grammar position
    "string": {"type": "object", "properties": {"text": {"type": "string"}},
               "required": ["text"], "additionalProperties": False},
    # a bounded string (maxLength): each character index is its own position today
    "bounded_string": {"type": "object", "properties": {"text": {"type": "string",
                                                                 "maxLength": 4000}},
                       "required": ["text"], "additionalProperties": False},
}


# Fixed keys (some long) and short bounded values: most of an object is forced text.
FIXED_KEYS = {"type": "object", "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 999},
    "name": {"enum": ["ann", "bob", "cho"]},
    "active": {"type": "boolean"},
    "role": {"enum": ["admin", "user", "guest"]},
    "score": {"type": "integer", "minimum": 0, "maximum": 100},
    "country": {"enum": ["france", "germany", "italy"]},
    "verified_email_address": {"type": "boolean"},
    "subscription_tier": {"enum": ["free", "pro"]}},
    "required": ["id", "name", "active", "role", "score", "country", "verified_email_address",
                 "subscription_tier"],
    "additionalProperties": False}


def object_seconds(url, n, seed):
    """Seconds per finished object (n objects in one request) and the tokens generated."""
    body = {"messages": [{"role": "user", "content": "Write."}], "n": n, "temperature": 1.0,
            "seed": seed, "max_tokens": 400,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "s", "schema": FIXED_KEYS}}}
    start = time.time()
    status, reply = post(url, body)
    seconds = time.time() - start
    assert status == 200, reply
    for choice in reply["choices"]:
        assert choice["finish_reason"] == "stop", choice
        json.loads(choice["message"]["content"])
    return seconds / n, reply["usage"]["completion_tokens"]


def jump_forward(args):
    on, on_url = start_server(args.binary, args.model, "/tmp/structured_speed_on.log")
    off, off_url = start_server(args.binary, args.model, "/tmp/structured_speed_off.log",
                                ["--no-jump-forward"])
    result = {"model": args.model, "rounds": args.rounds, "schema": FIXED_KEYS}
    try:
        for url in (on_url, off_url):
            object_seconds(url, 1, 0)  # compiles the grammar
        for n in (int(b) for b in args.batches.split(",")):
            rows = {"on": [], "off": [], "on_tokens": [], "off_tokens": []}
            for seed in range(1, args.rounds + 1):
                for side, url in (("on", on_url), ("off", off_url)):
                    seconds, tokens = object_seconds(url, n, seed)
                    rows[side].append(seconds)
                    rows[side + "_tokens"].append(tokens)
            ratio = statistics.median(rows["off"]) / statistics.median(rows["on"])
            result[f"batch{n}"] = {**rows, "speedup_of_medians": ratio}
            print(f"batch {n}: seconds per object with jump-forward "
                  f"{statistics.median(rows['on']):.2f}, without "
                  f"{statistics.median(rows['off']):.2f}: {ratio:.2f}x (tokens "
                  f"{sum(rows['on_tokens'])} vs {sum(rows['off_tokens'])}; "
                  f"on {[round(x, 2) for x in rows['on']]}, "
                  f"off {[round(x, 2) for x in rows['off']]})", flush=True)
    finally:
        for child in (on, off):
            child.terminate()
            child.wait()
    return result


def run(url, n, tokens, constrained, schema=None):
    body = {"messages": [{"role": "user", "content": "Write."}], "n": n, "temperature": 1.0,
            "seed": 1, "max_tokens": tokens}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "s", "schema": schema}}
    else:
        body["ignore_eos"] = True
    start = time.time()
    status, reply = post(url, body)
    seconds = time.time() - start
    assert status == 200, reply
    generated = reply["usage"]["completion_tokens"]
    return generated / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "build/infer"))
    parser.add_argument("--model", default=os.path.join(ROOT, "models/Llama-3.2-1B-Instruct"))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--report", default="")
    parser.add_argument("--schema", default="string", choices=sorted(SCHEMAS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--jump-forward", action="store_true",
                        help="compare a fixed-keys schema with and without jump-forward")
    args = parser.parse_args()
    if args.jump_forward:
        result = jump_forward(args)
        if args.report:
            with open(args.report, "w") as f:
                json.dump(result, f, indent=1)
        return 0
    schema = SCHEMAS[args.schema]
    child, url = start_server(args.binary, args.model, "/tmp/structured_speed.log")
    result = {"model": args.model, "tokens": args.tokens, "rounds": args.rounds,
              "schema": args.schema}
    try:
        run(url, 1, 4, True, schema)  # compiles the grammar (cached after)
        for n in (int(b) for b in args.batches.split(",")):
            free, constrained = [], []
            for _ in range(args.rounds):
                free.append(run(url, n, args.tokens, False))
                constrained.append(run(url, n, args.tokens, True, schema))
            ratio = statistics.median(constrained) / statistics.median(free)
            result[f"batch{n}"] = {"free_tok_s": free, "constrained_tok_s": constrained,
                                   "ratio_of_medians": ratio}
            print(f"batch {n}: free {statistics.median(free):.2f} tok/s, constrained "
                  f"{statistics.median(constrained):.2f} tok/s, ratio {ratio:.3f} "
                  f"(free {[round(x, 2) for x in free]}, constrained "
                  f"{[round(x, 2) for x in constrained]})", flush=True)
    finally:
        child.terminate()
        child.wait()
    if args.report:
        with open(args.report, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
