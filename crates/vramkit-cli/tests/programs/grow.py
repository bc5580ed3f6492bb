"""Holds --gib tensors of 1 GiB on the GPU (or $GIB), then exits with --exit (or, with
--abort-at-exit, aborts once Python is exiting): a small program for vramkit run's tests."""
import argparse
import atexit
import os
import sys

if "--abort-at-exit" in sys.argv:
    # Registered before torch is imported, so it runs after vramkit's exit handler: a crash in
    # teardown, as torch's own sometimes is.
    atexit.register(os.abort)

import torch

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--gib", type=int, default=int(os.environ.get("GIB", "1")))
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--abort-at-exit", action="store_true")
args = parser.parse_args()
held = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(args.gib)]
print(f"holding {len(held)} GiB")
raise SystemExit(args.exit)
