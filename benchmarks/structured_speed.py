#!/usr/bin/python3
"""Speed of constrained decoding (issue 26): decode tok/s of JSON-schema-constrained requests
beside free ones on the same server, in one run, alternating, at batch 1 and batch 16 (n=16
choices of one request). The constrained schema keeps the model inside one long string (a free
walk of tokens), so every step pays for a mask over the whole vocabulary; the free requests
ignore EOS so both sides generate the same number of tokens.

Usage: /usr/bin/python3 benchmarks/structured_speed.py [--model models/Llama-3.2-1B-Instruct]
         [--tokens 64] [--rounds 3] [--report FILE]
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
    args = parser.parse_args()
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
