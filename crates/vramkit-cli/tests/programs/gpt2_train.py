"""Trains a GPT-2-small-sized language model (124M parameters) for a few steps on random tokens.

A user's training script as vramkit run sees it: nothing in it knows about vramkit. The batch size
comes from --batch (or the environment variable BS); mixed precision is bfloat16 where the GPU has
it and float16 with a gradient scaler where it does not (a T4).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import training


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
    args = training.arguments(__doc__, batch=8)
    seq = 1024
    model = GPT().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)

    def loss_of_step(step):
        ids = torch.randint(0, 50257, (args.batch, seq + 1), device="cuda")
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())

    training.train(loss_of_step, optimizer, args.steps, training.half_precision())


if __name__ == "__main__":
    main()
