"""Fragments PyTorch's cache, then asks for a block larger than any hole: a program for vramkit run's tests.

A 1 GiB segment is cut into ten 100 MiB tensors and every other one is freed: 500 MiB is free, in
pieces of 100 MiB that cannot be returned while their neighbours live. On a 1.5 GiB card the
600 MiB request then fails with PyTorch's defaults; expandable segments unmap the holes and fit it.
"""
import torch

MIB = 1 << 20
whole = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda")
del whole
pieces = [torch.empty(100 * MIB, dtype=torch.uint8, device="cuda") for _ in range(10)]
del pieces[::2]
wide = torch.empty(600 * MIB, dtype=torch.uint8, device="cuda")
print("fitted", len(pieces), wide.numel() // MIB)
