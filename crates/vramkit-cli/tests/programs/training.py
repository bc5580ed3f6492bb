"""What the training scripts here share: their arguments and their loop of optimizer steps."""
import argparse
import os

import torch


def arguments(description, batch):
    """--batch (default $BS, else `batch`) and --steps."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch", type=int, default=int(os.environ.get("BS", str(batch))))
    parser.add_argument("--steps", type=int, default=2)
    return parser.parse_args()


def half_precision():
    """bfloat16 where the GPU has it, else float16 (a T4)."""
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def train(loss_of_step, optimizer, steps, dtype):
    """Runs `steps` optimizer steps of `loss_of_step(step)` under autocast to `dtype`, with a
    gradient scaler for float16, as mixed-precision training is usually written."""
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    for step in range(steps):
        with torch.autocast("cuda", dtype=dtype):
            loss = loss_of_step(step)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.3f}")
