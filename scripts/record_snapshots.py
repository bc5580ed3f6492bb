#!/usr/bin/env python3
"""Record real PyTorch memory snapshots for vramkit's test data.

Runs small workloads with random weights (nothing is downloaded) under
several PYTORCH_CUDA_ALLOC_CONF settings, with
torch.cuda.memory._record_memory_history on from the start of each process,
and dumps one snapshot per (workload, setting) with pickle protocol 4 (what
pytorch.org/memory_viz reads). Each run is its own process, because the
allocator settings are read once per process.

    python3 scripts/record_snapshots.py --out data/traces/recorded [--steps 3] [--only gpt2]

Workloads:
  gpt2      a GPT-2-small-sized transformer built from a config, variable sequence lengths
  resnet    a ResNet-50-like CNN, batches of images
  unet      a diffusion-style UNet with down/up blocks and skip connections
  streams   the transformer with its loss computed on a second stream (record_stream)
  oom       a loop that grows its batch until CUDA runs out of memory, then dumps

Settings (each workload is run under each):
  default, max_split_size_mb:128, roundup_power2_divisions:4,
  expandable_segments:True, garbage_collection_threshold:0.6 with
  per_process_memory_fraction:0.8.

Frames are trimmed to the innermost 8 Python frames to keep files small
(the task's limit is 30 MB for all recorded files together).
"""

import argparse
import os
import pickle
import subprocess
import sys

SETTINGS = {
    "default": "",
    "max_split_128": "max_split_size_mb:128",
    "roundup_4": "roundup_power2_divisions:4",
    "expandable": "expandable_segments:True",
    "gc_fraction": "garbage_collection_threshold:0.6,per_process_memory_fraction:0.8",
}
WORKLOADS = ["gpt2", "resnet", "unet", "streams", "oom"]
MAX_FRAMES = 8


def trim_frames(snapshot):
    """Keeps the innermost frames of every stack (shared lists stay shared)."""
    seen = {}

    def trim(frames):
        key = id(frames)
        if key not in seen:
            seen[key] = frames[:MAX_FRAMES]
        return seen[key]

    for seg in snapshot.get("segments", []):
        if "frames" in seg:
            seg["frames"] = trim(seg["frames"])
        for block in seg.get("blocks", []):
            if "frames" in block:
                block["frames"] = trim(block["frames"])
    for trace in snapshot.get("device_traces", []):
        for entry in trace:
            if "frames" in entry:
                entry["frames"] = trim(entry["frames"])
    return snapshot


# gpt2, resnet and unet call on_step(step), when given, at the end of each
# training step (scripts/gpu/bench_torch.py times the steps with it).


def gpt2(torch, steps, device, on_step=None):
    layer = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072, batch_first=True)
    model = torch.nn.Sequential(
        torch.nn.Embedding(50257, 768),
        torch.nn.TransformerEncoder(layer, num_layers=12),
        torch.nn.Linear(768, 50257),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(steps):
        seq = [128, 384, 256, 512, 192][step % 5]
        tokens = torch.randint(0, 50257, (8, seq), device=device)
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), tokens.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step(step)


def resnet(torch, steps, device, on_step=None):
    def block(cin, cout, stride):
        return torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(),
            torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(),
        )

    layers = [torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU()]
    cin = 64
    for cout, n in [(64, 3), (128, 4), (256, 6), (512, 3)]:
        for i in range(n):
            layers.append(block(cin, cout, 2 if i == 0 and cout != 64 else 1))
            cin = cout
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(512, 1000)]
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        batch = [32, 64, 48][step % 3]
        x = torch.randn(batch, 3, 224, 224, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step(step)


def unet(torch, steps, device, on_step=None):
    class UNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            chans = [64, 128, 256, 512]
            self.down = torch.nn.ModuleList()
            cin = 4
            for c in chans:
                self.down.append(torch.nn.Sequential(torch.nn.Conv2d(cin, c, 3, padding=1), torch.nn.SiLU(), torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.SiLU()))
                cin = c
            self.up = torch.nn.ModuleList()
            for c in reversed(chans[:-1]):
                self.up.append(torch.nn.Sequential(torch.nn.Conv2d(cin + c, c, 3, padding=1), torch.nn.SiLU()))
                cin = c
            self.out = torch.nn.Conv2d(cin, 4, 1)

        def forward(self, x):
            skips = []
            for i, d in enumerate(self.down):
                x = d(x)
                if i < len(self.down) - 1:
                    skips.append(x)
                    x = torch.nn.functional.avg_pool2d(x, 2)
            for u in self.up:
                x = torch.nn.functional.interpolate(x, scale_factor=2)
                x = u(torch.cat([x, skips.pop()], dim=1))
            return self.out(x)

    model = UNet().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(steps):
        res = [64, 96, 128][step % 3]
        x = torch.randn(16, 4, res, res, device=device)
        noise = torch.randn_like(x)
        loss = torch.nn.functional.mse_loss(model(x + noise), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step(step)


def streams(torch, steps, device):
    side = torch.cuda.Stream()
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(device)
    for step in range(steps * 4):
        x = torch.randn(256 + 64 * (step % 4), 1024, device=device)
        y = model(x)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            z = (y * y).sum(dim=1)
        y.record_stream(side)
        z.record_stream(torch.cuda.current_stream())
        torch.cuda.current_stream().wait_stream(side)
        (z.mean()).backward()
        del x, y, z


def oom(torch, steps, device):
    held = []
    size = 256 << 20
    try:
        while True:
            held.append(torch.empty(size, dtype=torch.uint8, device=device))
            held.append(torch.empty(3 << 20, dtype=torch.uint8, device=device))
            if len(held) % 4 == 0:
                del held[-4]
            size = int(size * 1.3)
    except torch.OutOfMemoryError:
        pass


def run_one(workload, setting, out, steps):
    import torch

    device = torch.device("cuda")
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    globals()[workload](torch, steps, device)
    torch.cuda.synchronize()
    snapshot = trim_frames(torch.cuda.memory._snapshot())
    path = os.path.join(out, f"{workload}__{setting}.pickle")
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    torch.cuda.memory._record_memory_history(enabled=None)
    print(f"{path}: {os.path.getsize(path)} bytes")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for the snapshots")
    p.add_argument("--steps", type=int, default=3, help="training steps per workload")
    p.add_argument("--only", choices=WORKLOADS, action="append", help="run only these workloads")
    p.add_argument("--setting", choices=list(SETTINGS), action="append", help="run only these settings")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "SETTING"), help=argparse.SUPPRESS)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        run_one(args.child[0], args.child[1], args.out, args.steps)
        return 0
    failed = 0
    for workload in args.only or WORKLOADS:
        for name in args.setting or list(SETTINGS):
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=SETTINGS[name])
            cmd = [sys.executable, __file__, "--out", args.out, "--steps", str(args.steps), "--child", workload, name]
            r = subprocess.run(cmd, env=env)
            if r.returncode != 0:
                print(f"{workload} under {name!r} failed with exit {r.returncode}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
