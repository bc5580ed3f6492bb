"""Trains a denoising-diffusion UNet (DDPM-style, pixel space) for a few steps on random images.

A user's training script: 64x64 RGB images, a sinusoidal timestep embedding added in every
residual block, self-attention (nn.MultiheadAttention) at 16x16 and 8x8, skip connections from
the down path to the up path, the noise-prediction loss, AdamW, bfloat16 autocast where the GPU has
it. The batch size is --batch (or $BS).
"""
import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoidal(t, dim):
    freqs = torch.exp(torch.arange(dim // 2, device=t.device) * (-math.log(10000.0) / (dim // 2)))
    angles = t.float()[:, None] * freqs[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class Residual(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.block1 = nn.Sequential(nn.GroupNorm(32, cin), nn.SiLU(), nn.Conv2d(cin, cout, 3, padding=1))
        self.time = nn.Sequential(nn.SiLU(), nn.Linear(tdim, cout))
        self.block2 = nn.Sequential(nn.GroupNorm(32, cout), nn.SiLU(), nn.Conv2d(cout, cout, 3, padding=1))
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.block1(x) + self.time(temb)[:, :, None, None]
        return self.block2(h) + self.skip(x)


class SelfAttention(nn.Module):
    def __init__(self, channels, heads=4):
        super().__init__()
        self.norm = nn.GroupNorm(32, channels)
        self.attention = nn.MultiheadAttention(channels, heads, batch_first=True)

    def forward(self, x):
        b, c, h, w = x.shape
        seq = self.norm(x).flatten(2).transpose(1, 2)
        out, _ = self.attention(seq, seq, seq, need_weights=False)
        return x + out.transpose(1, 2).reshape(b, c, h, w)


class UNet(nn.Module):
    def __init__(self, base=128, mults=(1, 2, 2, 4), attention_at=(16, 8), size=64):
        super().__init__()
        tdim = base * 4
        self.base = base
        self.time = nn.Sequential(nn.Linear(base, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, base, 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        chans, skips, res = base, [base], size
        for level, mult in enumerate(mults):
            for _ in range(2):
                attn = SelfAttention(base * mult) if res in attention_at else nn.Identity()
                self.down.append(nn.ModuleList([Residual(chans, base * mult, tdim), attn]))
                chans = base * mult
                skips.append(chans)
            if level < len(mults) - 1:
                self.down.append(nn.Conv2d(chans, chans, 3, stride=2, padding=1))
                skips.append(chans)
                res //= 2
        self.middle = nn.ModuleList([Residual(chans, chans, tdim), SelfAttention(chans), Residual(chans, chans, tdim)])
        for level, mult in reversed(list(enumerate(mults))):
            for _ in range(3):
                attn = SelfAttention(base * mult) if res in attention_at else nn.Identity()
                self.up.append(nn.ModuleList([Residual(chans + skips.pop(), base * mult, tdim), attn]))
                chans = base * mult
            if level > 0:
                self.up.append(nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(chans, chans, 3, padding=1)))
                res *= 2
        self.out = nn.Sequential(nn.GroupNorm(32, chans), nn.SiLU(), nn.Conv2d(chans, 3, 3, padding=1))

    def forward(self, x, t):
        temb = self.time(sinusoidal(t, self.base))
        h = self.inp(x)
        hs = [h]
        for layer in self.down:
            h = layer[1](layer[0](h, temb)) if isinstance(layer, nn.ModuleList) else layer(h)
            hs.append(h)
        h = self.middle[2](self.middle[1](self.middle[0](h, temb)), temb)
        for layer in self.up:
            if isinstance(layer, nn.ModuleList):
                h = layer[1](layer[0](torch.cat([h, hs.pop()], dim=1), temb))
            else:
                h = layer(h)
        return self.out(h)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=int(os.environ.get("BS", "32")))
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    model = UNet().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    betas = torch.linspace(1e-4, 0.02, 1000, device="cuda")
    alphas = torch.cumprod(1 - betas, dim=0)
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, 64, 64, device="cuda")
        t = torch.randint(0, 1000, (args.batch,), device="cuda")
        noise = torch.randn_like(images)
        a = alphas[t][:, None, None, None]
        noisy = a.sqrt() * images + (1 - a).sqrt() * noise
        with torch.autocast("cuda", dtype=half):
            loss = F.mse_loss(model(noisy, t).float(), noise)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
