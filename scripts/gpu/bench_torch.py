#!/usr/bin/env python3
"""vramkit against PyTorch's own CUDA caching allocator, side by side, on a GPU.

  train   a few training steps of scripts/record_snapshots.py's gpt2, resnet
          and unet under each allocator, each run in a fresh process (the
          allocator is chosen before CUDA starts):
            native              PyTorch's caching allocator
            vramkit             vramkit.torch.enable(): PyTorch's defaults
            vramkit-expandable  vramkit.torch.enable("expandable_segments:True")
            native-expandable   PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
          Reports the median step time after the warm-up steps (synchronised
          at the end of every step), the peak reserved memory as the
          allocator reports it (torch.cuda.max_memory_reserved() or
          vramkit.max_memory_reserved()), and the peak device memory in use
          as the driver sees it (total - free from torch.cuda.mem_get_info()
          after every step; this includes the CUDA context).

  micro   nanoseconds per malloc+free pair on the cache-hit path, for 512 B,
          1 MiB and 32 MiB: PyTorch's raw_alloc/raw_delete, vramkit_malloc/
          vramkit_free from libvramkit_capi.so used alone (dlopen), and
          PyTorch's raw_alloc/raw_delete with vramkit installed as its
          pluggable allocator. scripts/gpu/malloc_pair.cpp, compiled with
          torch.utils.cpp_extension.load_inline (g++ and ninja; no network).

    python3 scripts/gpu/bench_torch.py train --json train.json
    python3 scripts/gpu/bench_torch.py micro --lib gpu-kit/release/libvramkit_capi.so --json micro.json
    python3 scripts/gpu/bench_torch.py train --dry-run     # no GPU: made-up numbers, formatting only

The vramkit runs need the vramkit Python package importable (installed, or
on PYTHONPATH). scripts/gpu/run.sh runs both on the GPU machine.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RECORD_SCRIPT = os.path.join(REPO, "scripts", "record_snapshots.py")
MICRO_SOURCE = os.path.join(HERE, "malloc_pair.cpp")
RESULT_PREFIX = "BENCH_RESULT "
MiB = 1 << 20

# name -> (label, backend, settings). "native" settings go to
# PYTORCH_CUDA_ALLOC_CONF; "vramkit" settings to vramkit.torch.enable().
ALLOCATORS = {
    "native": ("PyTorch native", "native", ""),
    "vramkit": ("vramkit (defaults)", "vramkit", None),
    "vramkit-expandable": ("vramkit expandable_segments:True", "vramkit", "expandable_segments:True"),
    "native-expandable": ("PyTorch native expandable_segments:True", "native", "expandable_segments:True"),
}
WORKLOADS = ["gpt2", "resnet", "unet"]
MICRO_SIZES = [512, 1 * MiB, 32 * MiB]
MICRO_COLUMNS = [
    ("torch_native", "PyTorch raw_alloc/raw_delete (native)"),
    ("vramkit_capi", "vramkit_malloc/vramkit_free (C ABI, dlopen)"),
    ("torch_pluggable_vramkit", "PyTorch raw_alloc/raw_delete -> pluggable vramkit"),
]
# Variables that would change which allocator or which settings a child gets.
ALLOCATOR_ENV = ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "VRAMKIT_ALLOC_CONF", "VRAMKIT_DEVICE"]


def load_record_script():
    spec = importlib.util.spec_from_file_location("record_snapshots", RECORD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child_env(allocator):
    """The environment of a fresh process for `allocator`: none of the
    allocator variables of this one, plus PyTorch's settings for native."""
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    _, backend, conf = ALLOCATORS[allocator]
    if backend == "native" and conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return env


def environment(dry_run=False):
    """Device, driver and library versions, for the report."""
    info = {"python": sys.version.split()[0], "dry_run": dry_run}
    if dry_run:
        info.update(device="(dry run: no GPU)", driver="n/a", torch="n/a", cuda="n/a", vramkit="n/a")
        return info
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip().splitlines()
        if smi:
            name, driver, memory = [part.strip() for part in smi[0].split(",")]
            info.update(device=name, driver=driver, memory=memory)
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda)
    except ImportError:
        info["torch"] = "not installed"
    try:
        import vramkit

        info["vramkit"] = vramkit.__version__
    except ImportError:
        info["vramkit"] = "not importable"
    return info


def write_json(path, data):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, path)


def run_child(args, env, timeout):
    """Runs this script as a child; returns (parsed result or None, error)."""
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    try:
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        output, code = done.stdout, done.returncode
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or ""
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
        code = None
    result = None
    for line in output.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
        else:
            print("    " + line)
    if code is None:
        return result, f"timed out after {timeout:.0f} s"
    if code != 0 or result is None:
        return result, f"exit {code}" + ("" if result else ", no result")
    return result, None


def time_left(deadline):
    return float("inf") if deadline is None else deadline - time.time()


# ---------------------------------------------------------------- train


def child_train(workload, allocator, steps, warmup, dry_run):
    label, backend, conf = ALLOCATORS[allocator]
    if dry_run:
        # Made-up numbers, for checking the tables and the JSON only.
        rng = random.Random(f"{workload}/{allocator}")
        base = {"gpt2": 60.0, "resnet": 95.0, "unet": 40.0}[workload]
        step_ms = [base * (3.0 if i == 0 else 1.0) * rng.uniform(0.97, 1.05) for i in range(steps)]
        peak = int({"gpt2": 9.5, "resnet": 7.0, "unet": 3.5}[workload] * 1024 * MiB * rng.uniform(0.9, 1.1))
        driver_used = [peak + 520 * MiB] * steps
        counters = {"segment.all.allocated": rng.randint(10, 60), "num_alloc_retries": 0, "num_ooms": 0}
        result = summarize_train(step_ms, warmup, peak, int(peak * 0.9), driver_used, 520 * MiB, counters)
        result["dry_run"] = True
        print(RESULT_PREFIX + json.dumps(result))
        return 0

    if backend == "vramkit":
        import vramkit

        vramkit.torch.enable(conf)
    import torch

    record = load_record_script()
    torch.manual_seed(0)
    device = torch.device("cuda")
    free, total = torch.cuda.mem_get_info()
    baseline = total - free
    step_ms, driver_used = [], []
    last = [time.perf_counter()]

    def on_step(step):
        torch.cuda.synchronize()
        now = time.perf_counter()
        step_ms.append((now - last[0]) * 1e3)
        free, total = torch.cuda.mem_get_info()
        driver_used.append(total - free)
        last[0] = time.perf_counter()

    torch.cuda.synchronize()
    last[0] = time.perf_counter()
    getattr(record, workload)(torch, steps, device, on_step=on_step)
    torch.cuda.synchronize()

    if backend == "vramkit":
        import vramkit

        stats = vramkit.memory_stats()
        peak_reserved, peak_allocated = vramkit.max_memory_reserved(), vramkit.max_memory_allocated()
    else:
        stats = torch.cuda.memory_stats()
        peak_reserved, peak_allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
    counters = {k: stats.get(k) for k in ("segment.all.allocated", "num_alloc_retries", "num_ooms", "allocation.all.allocated")}
    result = summarize_train(step_ms, warmup, peak_reserved, peak_allocated, driver_used, baseline, counters)
    if backend == "vramkit":
        result["vramkit_settings"] = str(vramkit.settings())
    else:
        result["pytorch_cuda_alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    print(RESULT_PREFIX + json.dumps(result))
    return 0


def summarize_train(step_ms, warmup, peak_reserved, peak_allocated, driver_used, baseline, counters):
    measured = step_ms[warmup:]
    return {
        "median_step_ms": statistics.median(measured) if measured else None,
        "min_step_ms": min(measured) if measured else None,
        "step_ms": [round(t, 3) for t in step_ms],
        "peak_reserved_bytes": peak_reserved,
        "peak_allocated_bytes": peak_allocated,
        "peak_driver_used_bytes": max(driver_used) if driver_used else None,
        "driver_used_before_bytes": baseline,
        "counters": counters,
    }


def cmd_train(args):
    workloads = args.workloads or WORKLOADS
    allocators = args.allocators or list(ALLOCATORS)
    deadline = args.deadline
    report = {
        "kind": "train",
        "dry_run": args.dry_run,
        "steps": args.steps,
        "warmup": args.warmup,
        "environment": environment(args.dry_run),
        "runs": [],
    }
    if args.warmup >= args.steps:
        sys.exit("--warmup must be below --steps")
    for workload in workloads:
        for allocator in allocators:
            label = ALLOCATORS[allocator][0]
            run = {"workload": workload, "allocator": allocator, "label": label}
            left = time_left(deadline)
            if left < 20:
                run["error"] = "not run: out of time"
                print(f"== {workload} / {allocator}: not run, out of time", flush=True)
            else:
                print(f"== {workload} / {allocator}", flush=True)
                child = ["_child-train", workload, allocator, "--steps", str(args.steps), "--warmup", str(args.warmup)]
                if args.dry_run:
                    child.append("--dry-run")
                started = time.time()
                result, error = run_child(child, child_env(allocator), min(args.child_timeout, left - 5))
                run.update(result or {})
                run["wall_s"] = round(time.time() - started, 1)
                if error:
                    run["error"] = error
                    print(f"   {workload} / {allocator}: {error}", flush=True)
            report["runs"].append(run)
            write_json(args.json, report)
    print()
    print(train_markdown(report))
    failed = [r for r in report["runs"] if r.get("error")]
    return 1 if failed else 0


def _mib(value):
    return "—" if value is None else f"{value / MiB:,.0f}"


def train_markdown(report):
    runs = report["runs"]
    native = {r["workload"]: r.get("median_step_ms") for r in runs if r["allocator"] == "native"}
    lines = []
    if report.get("dry_run"):
        lines.append("**DRY RUN: made-up numbers, for checking the formatting only.**\n")
    lines.append(
        f"Training steps: median of steps {report['warmup'] + 1}-{report['steps']} of {report['steps']} "
        f"(the first {report['warmup']} are warm-up), torch.cuda.synchronize() at the end of every step; "
        "each row is a fresh process."
    )
    lines.append("")
    lines.append(
        "| workload | allocator | median step (ms) | vs native | peak reserved (MiB) | peak allocated (MiB) "
        "| peak used, driver (MiB) | segments allocated |"
    )
    lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        median = r.get("median_step_ms")
        if r.get("error") and median is None:
            lines.append(f"| {r['workload']} | {r['label']} | {r['error']} | | | | | |")
            continue
        base = native.get(r["workload"])
        if r["allocator"] == "native":
            versus = "(base)"
        elif not base or median is None:
            versus = "—"
        else:
            versus = f"{(median / base - 1) * 100:+.1f}%"
        segments = (r.get("counters") or {}).get("segment.all.allocated")
        lines.append(
            f"| {r['workload']} | {r['label']} | {median:.2f} | {versus} | {_mib(r.get('peak_reserved_bytes'))} "
            f"| {_mib(r.get('peak_allocated_bytes'))} | {_mib(r.get('peak_driver_used_bytes'))} "
            f"| {'—' if segments is None else segments} |"
        )
    lines.append("")
    lines.append(
        "Peak reserved is what the allocator reports (torch.cuda.max_memory_reserved() for native, "
        "vramkit.max_memory_reserved() for vramkit); peak used is total - free from "
        "torch.cuda.mem_get_info() after each step, CUDA context and libraries' workspaces included."
    )
    return "\n".join(lines)


# ---------------------------------------------------------------- micro


def build_extension(build_dir, verbose=False):
    """Compiles malloc_pair.cpp with load_inline; returns (module, info).
    Tries PyTorch's CUDA set-up first, then the CUDA headers found by hand
    (linking only c10_cuda), where the first fails."""
    import glob

    import torch.utils.cpp_extension as ext

    # There is no CUDA source: naming an architecture keeps load_inline from
    # asking the GPU for one (which would start CUDA in --build-only).
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    source = open(MICRO_SOURCE).read()
    attempts = [("with_cuda", dict(with_cuda=True))]
    includes = []
    for root in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), getattr(ext, "CUDA_HOME", None), "/usr/local/cuda"]:
        if root and os.path.exists(os.path.join(root, "include", "cuda_runtime_api.h")):
            includes.append(os.path.join(root, "include"))
    for entry in sys.path:
        for header in glob.glob(os.path.join(entry, "nvidia", "*", "include", "cuda_runtime_api.h")):
            includes.append(os.path.dirname(header))
    if includes:
        attempts.append(("c10_cuda", dict(with_cuda=False, extra_include_paths=list(dict.fromkeys(includes)), extra_ldflags=["-lc10_cuda"])))
    errors = []
    for tag, options in attempts:
        directory = os.path.join(build_dir, tag)
        os.makedirs(directory, exist_ok=True)
        started = time.time()
        try:
            module = ext.load_inline(
                name=f"vramkit_malloc_pair_{tag}",
                cpp_sources=[source],
                functions=["time_torch", "time_vramkit"],
                extra_cflags=["-O2"],
                build_directory=directory,
                verbose=verbose,
                **options,
            )
            return module, {"attempt": tag, "seconds": round(time.time() - started, 1), "errors": errors}
        except Exception as error:  # a compiler error is a RuntimeError; keep going
            print(f"micro: building with {tag} failed: {error}", file=sys.stderr)
            errors.append(f"{tag}: {str(error)[-2000:]}")
    raise RuntimeError("could not build malloc_pair.cpp: " + " | ".join(errors))


def child_micro(mode, lib, sizes, pairs, reps, build_dir, dry_run):
    if dry_run:
        rng = random.Random(mode)
        out = {"mode": mode, "build": {"attempt": "dry-run"}, "sizes": {}}
        for size in sizes:
            for column, base in (("torch_native", 180.0), ("vramkit_capi", 150.0)) if mode == "native" else (("torch_pluggable_vramkit", 260.0),):
                samples = [base * rng.uniform(0.95, 1.1) for _ in range(reps)]
                out["sizes"].setdefault(str(size), {})[column] = {"median_ns": statistics.median(samples), "samples_ns": samples}
        print(RESULT_PREFIX + json.dumps(out))
        return 0

    if mode == "pluggable":
        import vramkit

        vramkit.torch.enable()
    import torch

    module, build = build_extension(build_dir)
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the allocator and the stream exist
    torch.cuda.synchronize()
    if mode == "native":
        columns = {"torch_native": lambda size, n: module.time_torch(size, n)}
        if lib:
            columns["vramkit_capi"] = lambda size, n: module.time_vramkit(lib, size, n)
    else:
        columns = {"torch_pluggable_vramkit": lambda size, n: module.time_torch(size, n)}
    out = {"mode": mode, "build": build, "sizes": {}}
    for size in sizes:
        samples = {column: [] for column in columns}
        for column, fn in columns.items():
            fn(size, max(1, pairs // 10))  # warm-up
        for _ in range(reps):  # interleaved, so drift hits every column alike
            for column, fn in columns.items():
                samples[column].append(fn(size, pairs))
        for column, values in samples.items():
            out["sizes"].setdefault(str(size), {})[column] = {
                "median_ns": statistics.median(values),
                "samples_ns": [round(v, 2) for v in values],
            }
    torch.cuda.synchronize()
    print(RESULT_PREFIX + json.dumps(out))
    return 0


def cmd_micro(args):
    sizes = args.sizes or MICRO_SIZES
    build_dir = os.path.abspath(args.build_dir)
    if args.build_only:
        build_extension(build_dir, verbose=True)
        print("micro: extension built")
        return 0
    report = {
        "kind": "micro",
        "dry_run": args.dry_run,
        "pairs": args.pairs,
        "reps": args.reps,
        "lib": args.lib,
        "environment": environment(args.dry_run),
        "modes": {},
        "rows": [],
    }
    lib = os.path.abspath(args.lib) if args.lib else None
    if lib and not os.path.exists(lib) and not args.dry_run:
        print(f"micro: {lib} not found; vramkit_capi column left out", file=sys.stderr)
        lib = None
    failed = False
    for mode in ("native", "pluggable"):
        left = time_left(args.deadline)
        if left < 15:
            report["modes"][mode] = {"error": "not run: out of time"}
            failed = True
            continue
        print(f"== micro: {mode}", flush=True)
        child = ["_child-micro", mode, "--pairs", str(args.pairs), "--reps", str(args.reps), "--build-dir", build_dir,
                 "--sizes", ",".join(map(str, sizes))]
        if lib:
            child += ["--lib", lib]
        if args.dry_run:
            child.append("--dry-run")
        env = child_env("vramkit" if mode == "pluggable" else "native")
        result, error = run_child(child, env, min(args.child_timeout, left - 5))
        report["modes"][mode] = {"error": error} if error else {"build": result.get("build")}
        if error:
            failed = True
        for size, columns in ((result or {}).get("sizes") or {}).items():
            row = next((r for r in report["rows"] if r["size"] == int(size)), None)
            if row is None:
                row = {"size": int(size)}
                report["rows"].append(row)
            for column, value in columns.items():
                row[column + "_ns"] = value["median_ns"]
                row[column + "_samples_ns"] = value["samples_ns"]
        report["rows"].sort(key=lambda r: r["size"])
        write_json(args.json, report)
    write_json(args.json, report)
    print()
    print(micro_markdown(report))
    return 1 if failed else 0


def _size(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n} B"


def micro_markdown(report):
    lines = []
    if report.get("dry_run"):
        lines.append("**DRY RUN: made-up numbers, for checking the formatting only.**\n")
    lines.append(
        f"malloc+free pairs on the cache-hit path, ns per pair: median of {report['reps']} repetitions of "
        f"{report['pairs']:,} pairs, timed in C++ (scripts/gpu/malloc_pair.cpp), current device and stream."
    )
    lines.append("")
    head = "| size | " + " | ".join(label for _, label in MICRO_COLUMNS) + " | vramkit C ABI / PyTorch native |"
    lines.append(head)
    lines.append("| ---: |" + " ---: |" * (len(MICRO_COLUMNS) + 1))
    for row in report["rows"]:
        cells = []
        for column, _ in MICRO_COLUMNS:
            value = row.get(column + "_ns")
            cells.append("—" if value is None else f"{value:,.0f}")
        native, ours = row.get("torch_native_ns"), row.get("vramkit_capi_ns")
        ratio = "—" if not native or ours is None else f"{ours / native:.2f}x"
        lines.append(f"| {_size(row['size'])} | " + " | ".join(cells) + f" | {ratio} |")
    errors = {mode: m["error"] for mode, m in report.get("modes", {}).items() if m.get("error")}
    if errors:
        lines.append("")
        lines.append("Not measured: " + "; ".join(f"{mode}: {error}" for mode, error in errors.items()))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # The _child-* commands are this script's own; the metavar keeps them out of --help.
    sub = p.add_subparsers(dest="command", required=True, metavar="{train,micro}")

    train = sub.add_parser("train", help="training steps under each allocator, one fresh process per run")
    train.add_argument("--workloads", type=lambda s: s.split(","), help=f"comma-separated, of {','.join(WORKLOADS)}")
    train.add_argument("--allocators", type=lambda s: s.split(","), help=f"comma-separated, of {','.join(ALLOCATORS)}")
    train.add_argument("--steps", type=int, default=10, help="training steps per run (default 10)")
    train.add_argument("--warmup", type=int, default=2, help="steps left out of the median (default 2)")
    train.add_argument("--child-timeout", type=float, default=150, help="seconds per run (default 150)")
    train.add_argument("--deadline", type=float, help="a Unix time: start no run that cannot finish by then")
    train.add_argument("--json", help="write the results here (rewritten after every run)")
    train.add_argument("--dry-run", action="store_true", help="no GPU: made-up numbers, to check the tables and the JSON")

    micro = sub.add_parser("micro", help="ns per malloc+free pair: PyTorch's allocator and vramkit's C ABI")
    micro.add_argument("--lib", help="libvramkit_capi.so for the dlopen column")
    micro.add_argument("--pairs", type=int, default=200_000, help="pairs per repetition (default 200000)")
    micro.add_argument("--reps", type=int, default=7, help="repetitions; the median is reported (default 7)")
    micro.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="bytes, comma-separated (default 512,1MiB,32MiB)")
    micro.add_argument("--build-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "vramkit-malloc-pair"),
                       help="where load_inline builds the extension")
    micro.add_argument("--build-only", action="store_true", help="compile the extension and stop (no CUDA use)")
    micro.add_argument("--child-timeout", type=float, default=240, help="seconds per child process (default 240)")
    micro.add_argument("--deadline", type=float, help="a Unix time: start no child that cannot finish by then")
    micro.add_argument("--json", help="write the results here")
    micro.add_argument("--dry-run", action="store_true", help="no GPU: made-up numbers, to check the table and the JSON")

    child = sub.add_parser("_child-train")
    child.add_argument("workload", choices=WORKLOADS)
    child.add_argument("allocator", choices=list(ALLOCATORS))
    child.add_argument("--steps", type=int, required=True)
    child.add_argument("--warmup", type=int, required=True)
    child.add_argument("--dry-run", action="store_true")

    child = sub.add_parser("_child-micro")
    child.add_argument("mode", choices=["native", "pluggable"])
    child.add_argument("--lib")
    child.add_argument("--pairs", type=int, required=True)
    child.add_argument("--reps", type=int, required=True)
    child.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], required=True)
    child.add_argument("--build-dir", required=True)
    child.add_argument("--dry-run", action="store_true")

    args = p.parse_args(argv)
    for name in (getattr(args, "workloads", None) or []):
        if name not in WORKLOADS:
            p.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    for name in (getattr(args, "allocators", None) or []):
        if name not in ALLOCATORS:
            p.error(f"unknown allocator {name!r}; choose from {', '.join(ALLOCATORS)}")

    if args.command == "train":
        return cmd_train(args)
    if args.command == "micro":
        return cmd_micro(args)
    if args.command == "_child-train":
        return child_train(args.workload, args.allocator, args.steps, args.warmup, args.dry_run)
    return child_micro(args.mode, args.lib, args.sizes, args.pairs, args.reps, args.build_dir, args.dry_run)


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
