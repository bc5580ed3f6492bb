"""What the model scripts share: arguments, memory recording, the report.

Each script trains one step of a model on the GPU torch sees and prints one
JSON line: the peaks PyTorch's allocator reached, and, when it ran out of
memory, the torch.OutOfMemoryError text. The snapshot goes to --snapshot.
"""
import argparse, json, sys, time

import torch


def arguments(description, batch):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--snapshot", required=True, help="where to dump the memory snapshot (pickle)")
    return p.parse_args()


def run(args, step, **extra):
    """Records the allocator's history around `step()` and reports, with
    `extra` (callables are called after the step)."""
    started = time.monotonic()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    report = {"oom": None}
    try:
        step()
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        report["oom"] = str(e)
    torch.cuda.memory._dump_snapshot(args.snapshot)
    report.update(
        peak_reserved=torch.cuda.max_memory_reserved(),
        peak_allocated=torch.cuda.max_memory_allocated(),
        step_seconds=time.monotonic() - started,
        device=torch.cuda.get_device_name(0),
        torch=torch.__version__,
    )
    report.update({k: v() if callable(v) else v for k, v in extra.items()})
    print(json.dumps(report))
    sys.stdout.flush()
