#!/usr/bin/env python3
"""A cache of clean clang-tidy results, so that lint re-checks only the translation units whose
input changed (CI lints every unit of a fresh clone each run; most are unchanged).

A unit's key hashes what its clang-tidy result depends on: clang-tidy's version, every
.clang-tidy file, the unit's compile command and its preprocessed text (all headers included),
with the checkout's path replaced so that clones in other folders share keys. Only clean results
are kept (an empty file per key under $INFER_TIDY_CACHE, default ~/.cache/infer-clang-tidy).

  tidy_cache.py stale KEYS_FILE UNIT...   prints the units without a clean result; writes
                                          "unit key" lines for all of them to KEYS_FILE
  tidy_cache.py record KEYS_FILE          marks every unit of KEYS_FILE clean
"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("INFER_TIDY_CACHE",
                       os.path.join(os.path.expanduser("~"), ".cache", "infer-clang-tidy"))


def common_inputs():
    digest = hashlib.sha256()
    digest.update(subprocess.run(["clang-tidy", "--version"], capture_output=True,
                                 check=True).stdout)
    configs = subprocess.run(["git", "ls-files", "*.clang-tidy", ".clang-tidy"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for config in sorted(set(configs)):
        digest.update(config.encode())
        with open(os.path.join(ROOT, config), "rb") as f:
            digest.update(f.read())
    return digest.digest()


def unit_key(common, command, unit):
    """The key of one unit, or None when it cannot be preprocessed (then it is linted)."""
    args = command.get("arguments") or shlex.split(command["command"])
    # The same compiler and flags, preprocessing to stdout instead of compiling.
    pre, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if arg in ("-c", "-MD", "-MMD"):
            continue
        pre.append(arg)
    if pre and os.path.basename(pre[0]) == "ccache":
        pre = pre[1:]
    result = subprocess.run(pre + ["-E"], cwd=command["directory"], capture_output=True)
    if result.returncode != 0:
        return None
    root = ROOT.encode()
    digest = hashlib.sha256(common)
    digest.update(unit.encode())
    digest.update(" ".join(args).encode().replace(root, b"@ROOT@"))
    digest.update(result.stdout.replace(root, b"@ROOT@"))
    return digest.hexdigest()


def stale(keys_file, units):
    with open(os.path.join(ROOT, "build", "compile_commands.json")) as f:
        commands = {os.path.realpath(os.path.join(c["directory"], c["file"])): c
                    for c in json.load(f)}
    common = common_inputs()

    def key_of(unit):
        command = commands.get(os.path.realpath(os.path.join(ROOT, unit)))
        return unit_key(common, command, unit) if command else None

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        keys = list(pool.map(key_of, units))
    with open(keys_file, "w") as out:
        for unit, key in zip(units, keys):
            if key is not None:
                out.write(f"{unit} {key}\n")
            if key is None or not os.path.exists(os.path.join(CACHE, key)):
                print(unit)


def record(keys_file):
    os.makedirs(CACHE, exist_ok=True)
    with open(keys_file) as f:
        for line in f:
            _, key = line.split()
            open(os.path.join(CACHE, key), "w").close()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "stale":
        stale(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 3 and sys.argv[1] == "record":
        record(sys.argv[2])
    else:
        sys.exit(__doc__)
