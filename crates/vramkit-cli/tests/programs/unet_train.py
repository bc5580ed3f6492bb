"""Trains a denoising-diffusion UNet (DDPM-style, pixel space) for a few steps on random images.

A user's training script: 64x64 RGB images, a sinusoidal timestep embedding added in every
residual block, self-attention (nn.MultiheadAttention) at 16x16 and 8x8, skip connections from
the down path to the up path, the noise-prediction loss, AdamW, mixed precision. The batch size is
--batch (or $BS).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import training


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


class Level(nn.Module):
    """Residual blocks at one resolution, each followed by attention or not, taking (on the way up)
    one skip connection per block; `resample` changes the resolution after them."""

    def __init__(self, cin, cout, tdim, skips, attend, resample):
        super().__init__()
        self.skips = skips
        self.blocks = nn.ModuleList(Residual((cin if i == 0 else cout) + s, cout, tdim) for i, s in enumerate(skips))
        self.attend = nn.ModuleList(SelfAttention(cout) if attend else nn.Identity() for _ in skips)
        self.resample = resample

    def forward(self, x, temb, saved):
        for block, attend, skip in zip(self.blocks, self.attend, self.skips):
            x = attend(block(torch.cat([x, saved.pop()], dim=1) if skip else x, temb))
            if not skip:
                saved.append(x)
        return self.resample(x)


class UNet(nn.Module):
    def __init__(self, base=128, mults=(1, 2, 2, 4), attend_at=(16, 8), size=64):
        super().__init__()
        tdim, widths = base * 4, [base * m for m in mults]
        self.base = base
        self.time = nn.Sequential(nn.Linear(base, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, base, 3, padding=1)
        self.down, self.up, saved, cin = nn.ModuleList(), nn.ModuleList(), [base], base
        for i, width in enumerate(widths):
            last = i == len(widths) - 1
            resample = nn.Identity() if last else nn.Conv2d(width, width, 3, stride=2, padding=1)
            self.down.append(Level(cin, width, tdim, [0, 0], size >> i in attend_at, resample))
            saved += [width, width] + ([] if last else [width])
            cin = width
        self.middle = Level(cin, cin, tdim, [0], True, nn.Identity())
        self.middle_out = Residual(cin, cin, tdim)
        for i, width in reversed(list(enumerate(widths))):
            resample = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(width, width, 3, padding=1)) if i else nn.Identity()
            self.up.append(Level(cin, width, tdim, [saved.pop() for _ in range(3)], size >> i in attend_at, resample))
            cin = width
        self.out = nn.Sequential(nn.GroupNorm(32, cin), nn.SiLU(), nn.Conv2d(cin, 3, 3, padding=1))

    def forward(self, x, t):
        temb = self.time(sinusoidal(t, self.base))
        h = self.inp(x)
        saved = [h]
        for level in self.down:
            h = level(h, temb, saved)
            if not isinstance(level.resample, nn.Identity):
                saved.append(h)
        h = self.middle_out(self.middle(h, temb, []), temb)
        for level in self.up:
            h = level(h, temb, saved)
        return self.out(h)


def main():
    args = training.arguments(__doc__, batch=32)
    model = UNet().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    alphas = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, device="cuda"), dim=0)

    def loss_of_step(step):
        images = torch.randn(args.batch, 3, 64, 64, device="cuda")
        t = torch.randint(0, 1000, (args.batch,), device="cuda")
        noise = torch.randn_like(images)
        a = alphas[t][:, None, None, None]
        return F.mse_loss(model(a.sqrt() * images + (1 - a).sqrt() * noise, t).float(), noise)

    training.train(loss_of_step, optimizer, args.steps, training.half_precision())


if __name__ == "__main__":
    main()
