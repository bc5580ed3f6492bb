"""Holds --gib tensors of 1 GiB on the GPU (or $GIB), then exits with --exit: a small program for vramkit run's tests."""
import argparse
import os

import torch

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--gib", type=int, default=int(os.environ.get("GIB", "1")))
parser.add_argument("--exit", type=int, default=0)
args = parser.parse_args()
held = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(args.gib)]
print(f"holding {len(held)} GiB")
raise SystemExit(args.exit)
