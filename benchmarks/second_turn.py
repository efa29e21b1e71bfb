#!/usr/bin/env python3
"""A conversation's second turn against a running `infer serve`: how much of it is prefilled.

Turn 1 sends PROMPT random token ids (OpenAI completions, `--completions-format openai`) and
takes ANSWER tokens back (`return_token_ids`, `ignore_eos`); turn 2 sends the prompt, the
answer's ids and NEW more ids. Each turn's prefill is read from /metrics: prompt tokens less
prefix-cache hits (vllm:prompt_tokens_total, vllm:prefix_cache_hits_total). With prefix caching
turn 2 computes only what follows the last full block of turn 1's tokens (the new ids and the
answer's tail past a block boundary).

Usage: benchmarks/second_turn.py URL MODEL [PROMPT ANSWER NEW]
  e.g. infer serve --model DIR --load-format dummy -q int8 --completions-format openai
       --port 8091, then benchmarks/second_turn.py http://127.0.0.1:8091 DIR 800 40 30
"""
import json
import random
import re
import sys
import urllib.error
import urllib.request


def main():
    base, model = sys.argv[1], sys.argv[2]
    prompt_len, answer_len, new_len = (int(v) for v in (sys.argv[3:6] or (800, 40, 30)))

    def post(path, body):
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            return json.load(urllib.request.urlopen(request, timeout=3600))
        except urllib.error.HTTPError as error:
            sys.exit(f"{path}: {error.code} {error.read().decode()}")

    def computed():
        text = urllib.request.urlopen(base + "/metrics").read().decode()
        values = {}
        for name in ("vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total"):
            match = re.search(r"^" + re.escape(name) + r"(\{[^}]*\})? ([0-9.e+]+)$", text, re.M)
            values[name] = float(match.group(2))
        return values["vllm:prompt_tokens_total"] - values["vllm:prefix_cache_hits_total"]

    rng = random.Random(1)
    prompt = [rng.randrange(1000, 100000) for _ in range(prompt_len)]
    before = computed()
    first = post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": answer_len,
                                     "temperature": 0, "return_token_ids": True,
                                     "ignore_eos": True})
    answer = first["choices"][0]["token_ids"]
    middle = computed()
    turn2 = prompt + answer + [rng.randrange(1000, 100000) for _ in range(new_len)]
    post("/v1/completions", {"model": model, "prompt": turn2, "max_tokens": 1, "temperature": 0})
    after = computed()
    print(json.dumps({"turn1_prompt": len(prompt), "turn1_answer": len(answer),
                      "turn1_prefilled": middle - before, "turn2_prompt": len(turn2),
                      "turn2_new": new_len, "turn2_prefilled": after - middle}))


if __name__ == "__main__":
    main()
