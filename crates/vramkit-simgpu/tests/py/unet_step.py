"""One training step of a diffusion UNet (Stable-Diffusion-shaped, smaller):
residual blocks with GroupNorm and SiLU, a timestep embedding, self-attention
at the two lowest resolutions, skip connections, 64x64 latents with 4
channels, noise-prediction loss, AdamW, autocast to bfloat16."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(temb, cout)
        self.norm2, self.conv2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class Attention(nn.Module):
    def __init__(self, c, heads=8):
        super().__init__()
        self.heads, self.norm = heads, nn.GroupNorm(32, c)
        self.qkv, self.out = nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).unbind(1)
        y = F.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
        return x + self.out(y.transpose(-1, -2).reshape(b, c, h, w))


class UNet(nn.Module):
    def __init__(self, channels=(128, 256, 512, 512), attention=(False, False, True, True)):
        super().__init__()
        temb = channels[0] * 4
        self.temb = nn.Sequential(nn.Linear(channels[0], temb), nn.SiLU(), nn.Linear(temb, temb))
        self.stem = nn.Conv2d(4, channels[0], 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        cin, skips = channels[0], [channels[0]]
        for i, (c, attn) in enumerate(zip(channels, attention)):
            for _ in range(2):
                self.down.append(nn.ModuleList([ResBlock(cin, c, temb), Attention(c) if attn else nn.Identity()]))
                cin = c
                skips.append(c)
            if i < len(channels) - 1:
                self.down.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                skips.append(c)
        self.mid = nn.ModuleList([ResBlock(cin, cin, temb), Attention(cin), ResBlock(cin, cin, temb)])
        for i, (c, attn) in reversed(list(enumerate(zip(channels, attention)))):
            for _ in range(3):
                self.up.append(nn.ModuleList([ResBlock(cin + skips.pop(), c, temb), Attention(c) if attn else nn.Identity()]))
                cin = c
            if i > 0:
                self.up.append(nn.ConvTranspose2d(c, c, 4, stride=2, padding=1))
        self.head = nn.Sequential(nn.GroupNorm(32, cin), nn.SiLU(), nn.Conv2d(cin, 4, 3, padding=1))
        self.base = channels[0]

    def forward(self, x, t):
        emb = self.temb(timestep_embedding(t, self.base))
        h = self.stem(x)
        hs = [h]
        for layer in self.down:
            if isinstance(layer, nn.ModuleList):
                h = layer[1](layer[0](h, emb))
            else:
                h = layer(h)
            hs.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, emb)), emb)
        for layer in self.up:
            if isinstance(layer, nn.ModuleList):
                h = layer[1](layer[0](torch.cat([h, hs.pop()], dim=1), emb))
            else:
                h = layer(h)
        return self.head(h)


def main():
    args = common.arguments(__doc__, batch=8)

    def step():
        with torch.device("cuda"):
            model = UNet()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        latents = torch.randn(args.batch, 4, 64, 64, device="cuda")
        noise = torch.randn_like(latents)
        t = torch.randint(0, 1000, (args.batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(model(latents + noise, t).float(), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    common.run(args, step)


main()
