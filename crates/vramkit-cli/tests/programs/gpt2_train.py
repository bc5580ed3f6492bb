"""Trains a GPT-2-small-sized language model (124M parameters) for a few steps on random tokens.

A user's training script as vramkit run sees it: nothing in it knows about vramkit. The batch size
comes from --batch (or the environment variable BS); mixed precision is bfloat16 where the GPU has
it and float16 with a gradient scaler where it does not (a T4).
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPT(nn.Module):
    def __init__(self, vocab=50257, context=1024, width=768, depth=12, heads=12):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.unembed = nn.Linear(width, vocab, bias=False)
        self.unembed.weight = self.tokens.weight

    def forward(self, ids):
        length = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=ids.device)
        x = self.tokens(ids) + self.positions[:length]
        return self.unembed(self.norm(self.layers(x, mask=mask, is_causal=True)))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=int(os.environ.get("BS", "8")))
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    device = torch.device("cuda")
    model = GPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=half == torch.float16)
    for step in range(args.steps):
        ids = torch.randint(0, 50257, (args.batch, args.seq + 1), device=device)
        with torch.autocast("cuda", dtype=half):
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
