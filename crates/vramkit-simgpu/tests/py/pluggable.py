"""A training step with PyTorch's allocator swapped for a pluggable one that
allocates through the CUDA driver API (tests/c/driver_allocator.c), with
host-to-device copies into that memory. usage: pluggable.py LIBRARY"""
import ctypes, json, sys

import torch
import torch.nn as nn

library = sys.argv[1]
allocator = torch.cuda.memory.CUDAPluggableAllocator(library, "driver_alloc", "driver_free")
torch.cuda.memory.change_current_allocator(allocator)

model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(64, 256).cuda()                      # a host-to-device copy
pinned = torch.randn(64, 256).pin_memory()
x2 = pinned.cuda(non_blocking=True)                   # from pinned memory
loss = model(x + x2).square().mean()
loss.backward()
opt.step()
back = model[0].weight.detach().cpu()                # device to host reads zeros
print(json.dumps({
    "allocations": ctypes.CDLL(library).driver_allocations(),
    "loss": loss.item(),
    "weight_sum_after_copy_back": float(back.abs().sum()),
}))
