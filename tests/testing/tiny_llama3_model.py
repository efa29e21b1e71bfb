#!/usr/bin/env python3
"""A tiny model with the real Llama 3 vocabulary, for --load-format dummy runs that need text:
the llama fixture's config.json (its shapes) with Llama 3's vocabulary size and special ids, and
the real tokenizer files from .cache/tokenizers (scripts/fetch_tokenizers.sh). The same model as
tests/testing/llama3_vocab_model.h's Llama3VocabModelDir, for Python tests and shell scripts.

Usage: tests/testing/tiny_llama3_model.py FOLDER   (made if missing)
"""
import json
import os
import shutil
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def write(folder):
    with open(os.path.join(ROOT, "tests", "fixtures", "models", "llama", "model",
                           "config.json")) as f:
        config = json.load(f)
    config.update(vocab_size=128256, bos_token_id=128000, eos_token_id=[128001, 128008, 128009])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ROOT, ".cache", "tokenizers", "llama3", name), folder)
    return folder


if __name__ == "__main__":
    write(sys.argv[1])
