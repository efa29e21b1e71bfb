#!/usr/bin/python3
"""Validity of structured output (issue 26): random weights at temperature 1.0 walk each grammar
at random, the hardest case for a constrained decoder. For every JSON schema in a folder, N
generations per model through `infer serve`'s chat route (response_format json_schema): every
output that finishes with `stop` must parse and validate under Debian's python3-jsonschema (run
this with /usr/bin/python3), and, for schemas whose strings and arrays are bounded, every output
must finish with `stop`. Regex and choice requests are checked the same way (each output must
match the regex in full, or be one of the choices), and tool calls: with tool_choice `required`
every reply must call a tool and with `auto` any call it makes counts; each call's arguments
must validate under its tool's parameters.

The models: the fixtures' tiny shapes with each dev model's real vocabulary, tokenizer and chat
template (the mask depends on the vocabulary and the grammar, not on the model's size), or with
--real-size the dev configs at full size (--load-format dummy both ways).

Usage: /usr/bin/python3 benchmarks/structured_validity.py [--models llama3,qwen3,gemma3]
         [--n 20] [--schemas tests/fixtures/grammar/schemas] [--real-size] [--schemas-only]
         [--bounded-only] [--only a.json,b.json] [--auto-max-tokens 256] [--report FILE]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {  # fixture architecture, vocab size, eos ids, bos id
    "llama3": ("llama", 128256, [128001, 128008, 128009], 128000),
    "qwen3": ("qwen3", 151936, [151645, 151643], None),
    "gemma3": ("gemma3", 262144, [1, 106], 2),
}
DEV = {"llama3": "Llama-3.2-1B-Instruct", "qwen3": "Qwen3-1.7B", "gemma3": "gemma-3-1b-it"}


def model_dir(key, real_size, work):
    if real_size:
        return os.path.join(ROOT, "models", DEV[key])
    arch, vocab, eos, bos = TINY[key]
    folder = os.path.join(work, key)
    os.makedirs(folder)
    with open(os.path.join(ROOT, "tests/fixtures/models", arch, "model/config.json")) as f:
        config = json.load(f)
    config.update(vocab_size=vocab, eos_token_id=eos)
    if bos is not None:
        config["bos_token_id"] = bos
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ROOT, ".cache/tokenizers", key, name), folder)
    return folder


def start_server(binary, model, log_path, extra_args=()):
    log = open(log_path, "w")
    child = subprocess.Popen([binary, "serve", "--model", model, "--load-format", "dummy",
                              "--threads", "2", "--port", "0", "--served-model-name", "m",
                              "--max-model-len", "2048", *extra_args],
                             stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(1200):
        with open(log_path) as f:
            match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", f.read())
        if match:
            return child, match.group(1)
        if child.poll() is not None:
            break
        time.sleep(0.25)
    child.kill()
    raise RuntimeError("infer serve did not start: " + open(log_path).read()[-2000:])


def post(url, body):
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=3600) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def bounded(schema):
    """Whether every string and array the schema allows has a bound and no $ref recurses, so that
    sampling at random must end within max_tokens. Numbers count as bounded: the schema compiler
    bounds their digits (and whitespace), as llama.cpp's converter does."""
    def resolve(ref):
        node = schema
        for part in ref.lstrip("#/").split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def walk(node, refs):
        if isinstance(node, list):
            return all(walk(item, refs) for item in node)
        if not isinstance(node, dict):
            return True
        if "$ref" in node:
            ref = node["$ref"]
            if ref in refs or not ref.startswith("#") or resolve(ref) is None:
                return False  # a recursive schema may nest without bound
            if not walk(resolve(ref), refs | {ref}):
                return False
        types = node.get("type", [])
        types = types if isinstance(types, list) else [types]
        fixed = any(k in node for k in ("enum", "const", "format"))
        if "string" in types and not fixed and "maxLength" not in node and "pattern" not in node:
            return False
        tuple_items = isinstance(node.get("items"), list) and node.get("additionalItems") is False
        if ("array" in types and "maxItems" not in node and "prefixItems" not in node
                and not tuple_items):
            return False
        if node == {} or ("object" in types and node.get("additionalProperties") is not False):
            return False  # free-form values (JSON Schema allows extra keys unless told not to)
        return all(walk(value, refs) for key, value in node.items()
                   if key not in ("$defs", "definitions", "$ref"))

    return walk(schema, frozenset())


REGEXES = [r"\d{3}-\d{4}", r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)", r"(yes|no|maybe)",
           r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", r"[A-Z][a-z]{0,10}( [A-Z][a-z]{0,10}){0,2}"]
CHOICES = [["red", "green", "blue"], ["Paris", "Pau", "Pauillac", "Rome"], ["a", "ab", "abc"]]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
            "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
            "required": ["a", "b"], "additionalProperties": False}}}]


def check_other_kinds(url, n, max_tokens, auto_max_tokens):
    """Regex, choice and tool-call requests; yields (name, failures, summary)."""
    messages = [{"role": "user", "content": "Answer."}]
    for regex in REGEXES:
        status, reply = post(url, {"messages": messages, "n": n, "temperature": 1.0, "seed": 1,
                                   "max_tokens": max_tokens, "structured_outputs": {"regex": regex}})
        bad = [c["message"]["content"] for c in reply.get("choices", [])
               if c["finish_reason"] != "stop" or not re.fullmatch(regex, c["message"]["content"])]
        yield f"regex {regex}", (status != 200) + len(bad), f"{len(bad)} bad {bad[:3]}"
    for choices in CHOICES:
        status, reply = post(url, {"messages": messages, "n": n, "temperature": 1.0, "seed": 1,
                                   "max_tokens": max_tokens,
                                   "structured_outputs": {"choice": choices}})
        bad = [c["message"]["content"] for c in reply.get("choices", [])
               if c["message"]["content"] not in choices]
        yield f"choice {choices}", (status != 200) + len(bad), f"{len(bad)} bad {bad[:3]}"
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for tool_choice in ("required", "auto"):
        status, reply = post(url, {"messages": [{"role": "user", "content": "Weather in Oslo?"}],
                                   "n": n, "temperature": 1.0, "seed": 1,
                                   "max_tokens": auto_max_tokens if tool_choice == "auto"
                                   else max_tokens, "tools": TOOLS,
                                   "tool_choice": tool_choice})
        bad, calls = [], 0
        for choice in reply.get("choices", []):
            message = choice["message"]
            if tool_choice == "required" and not message.get("tool_calls"):
                bad.append(f"no call ({choice['finish_reason']}): {message.get('content')!r}"[:200])
            for call in message.get("tool_calls") or []:
                calls += 1
                try:
                    jsonschema.validate(json.loads(call["function"]["arguments"]),
                                        parameters[call["function"]["name"]])
                except (ValueError, KeyError, jsonschema.ValidationError) as error:
                    bad.append(f"{call['function']}: {str(error)[:200]}")
        yield (f"tools {tool_choice}", (status != 200) + len(bad),
               f"{calls} calls, {len(bad)} bad {bad[:3]}" +
               (f" ERROR {status} {reply}" if status != 200 else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "build/infer"))
    parser.add_argument("--models", default="llama3,qwen3,gemma3")
    parser.add_argument("--schemas", default=os.path.join(ROOT, "tests/fixtures/grammar/schemas"))
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--real-size", action="store_true")
    parser.add_argument("--schemas-only", action="store_true",
                        help="skip the regex, choice and tool-call checks")
    parser.add_argument("--auto-max-tokens", type=int, default=256,
                        help="max_tokens of the tools-auto check (random weights seldom call a "
                        "tool, so most replies are free text to this length)")
    parser.add_argument("--bounded-only", action="store_true",
                        help="only the schemas that bounded() accepts (at real size each of the "
                        "others runs to max_tokens)")
    parser.add_argument("--only", default="", help="comma-separated schema file names")
    parser.add_argument("--report", default="")
    args = parser.parse_args()
    schemas = sorted(f for f in os.listdir(args.schemas) if f.endswith(".json"))
    if args.only:
        schemas = [f for f in schemas if f in args.only.split(",")]
    if args.bounded_only:
        schemas = [f for f in schemas
                   if bounded(json.load(open(os.path.join(args.schemas, f))))]
    messages = [{"role": "user", "content": "Fill in the form."}]
    report = {"models": {}, "n": args.n, "schemas": len(schemas)}
    failures = 0
    work = tempfile.mkdtemp(prefix="infer-validity-")
    try:
        for key in args.models.split(","):
            model = model_dir(key, args.real_size, work)
            child, url = start_server(args.binary, model, os.path.join(work, key + ".log"))
            rows = []
            try:
                for name in schemas:
                    with open(os.path.join(args.schemas, name)) as f:
                        schema = json.load(f)
                    start = time.time()
                    status, reply = post(url, {
                        "messages": messages, "n": args.n, "temperature": 1.0, "seed": 1,
                        "max_tokens": args.max_tokens,
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": "s", "schema": schema}}})
                    row = {"schema": name, "status": status, "stop": 0, "length": 0,
                           "invalid": [], "seconds": round(time.time() - start, 2)}
                    if status != 200:
                        row["error"] = reply.get("error", {}).get("message")
                        failures += 1
                    else:
                        for choice in reply["choices"]:
                            text = choice["message"]["content"]
                            if choice["finish_reason"] != "stop":
                                row["length"] += 1
                                continue
                            row["stop"] += 1
                            try:
                                jsonschema.validate(json.loads(text), schema)
                            except (ValueError, jsonschema.ValidationError) as error:
                                row["invalid"].append({"text": text, "why": str(error)[:300]})
                        failures += len(row["invalid"])
                        if row["length"] and bounded(schema):
                            failures += 1
                    rows.append(row)
                    print(f"{key} {name}: {row['stop']} stop, {row['length']} length, "
                          f"{len(row['invalid'])} invalid, {row['seconds']} s"
                          + (f" ERROR {status} {row.get('error')}" if status != 200 else ""),
                          flush=True)
                others = [] if args.schemas_only else check_other_kinds(
                    url, args.n, args.max_tokens, args.auto_max_tokens)
                for name, bad, summary in others:
                    failures += bad
                    rows.append({"check": name, "failures": bad, "summary": summary})
                    print(f"{key} {name}: {summary}", flush=True)
            finally:
                child.terminate()
                child.wait()
            report["models"][key] = rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["failures"] = failures
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
