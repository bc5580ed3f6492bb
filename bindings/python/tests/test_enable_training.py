"""`vramkit.torch.enable()` running real training steps on the simulated GPU
the package ships, held to what PyTorch's own allocator does on the same
program.

Each step (vramkit-simgpu's model steps at small batches: GPT-2-small with
AdamW and bfloat16 autocast, ResNet-18 through cuDNN, a diffusion UNet) runs
in two fresh processes on the same simulated A100 (allocator_step.py): with
PyTorch's CUDA caching allocator, and after `vramkit.torch.enable()`, where
PyTorch's CUDAPluggableAllocator calls vramkit for every tensor. vramkit has
PyTorch's semantics and the simulated device hands out addresses as the
driver does (to PyTorch's cudaMalloc and vramkit's cuMemAlloc alike), so
after the step the two allocators must report the same:

- `memory_stats()`: every key PyTorch reports (peaks of reserved, allocated
  and requested bytes, allocation, segment and retry counts, ...; vramkit
  also has the newest release's `num_oom_rejections`);
- the snapshot's segments: address, sizes, stream, pool and every block;
- the history, event for event (action, address, size, stream);
- the settings, for every key vramkit reports.

That holds where vramkit follows the allocator rules of the torch release
it is loaded into (torch 2.10 and 2.11, and every release with expandable
segments); otherwise the exact comparison is a strict expected failure (see
the test), and what must hold
for every release is checked on its own: the steps run end to end, and
vramkit's stats agree with its snapshot.

Two differences are by design, and the comparison allows exactly these:

- Frees that come together may come in another order. Autocast keeps the
  weights it cast in a hash map keyed by host pointers and frees them in
  that map's order when the cache is cleared, an order that changes from
  process to process (two runs of PyTorch's own allocator differ the same
  way). Each run of consecutive free events is compared as a multiset, and
  where the order differed, so do the counts that follow the order of
  merges (the running counts and peaks of `inactive_split*`).
- vramkit's snapshot ends with a `snapshot` entry of its own: vramkit-core
  records it before copying the history, PyTorch after copying (so
  PyTorch's shows only in the next snapshot).
"""

import importlib.metadata
import os
import pickle
import subprocess
import sys

import pytest

import vramkit
from conftest import MODEL_STEPS, environment

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allocator_step.py")
CARD = "a100-80gb"


@pytest.fixture(scope="module")
def simulated_card(torch_on_simgpu):
    """The environment of a program on the simulated card: the stack the
    package ships, no vramkit settings or simulated device from outside."""
    env = environment({var: None for var in
                       ("VRAMKIT_DEVICE", "VRAMKIT_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")})
    env.update(vramkit.simulated_gpu_env(CARD))
    env["MODEL_STEPS"] = str(MODEL_STEPS)
    return env


def step_under_both_allocators(env, tmp_path, model, batch, conf):
    """The reports of one step under PyTorch's allocator and under vramkit's,
    both processes at once."""
    started = {}
    for allocator in ("pytorch", "vramkit"):
        out = tmp_path / f"{model}-{allocator}.pickle"
        argv = [sys.executable, DRIVER, allocator, model, str(batch), str(out), conf]
        started[allocator] = (subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out)
    reports = {}
    for allocator, (process, out) in started.items():
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, f"{model} under {allocator}'s allocator failed:\n{stderr[-4000:]}"
        with open(out, "rb") as f:
            reports[allocator] = pickle.load(f)
    return reports["pytorch"], reports["vramkit"]


def events(report):
    return [(e["action"], e["addr"], e["size"], e["stream"]) for e in report["snapshot"]["device_traces"][0]]


def frees_as_multisets(entries):
    """`entries` with each run of consecutive free events sorted."""
    grouped, frees = [], []
    for entry in entries:
        if entry[0] in ("free_requested", "free_completed"):
            frees.append(entry)
            continue
        grouped += sorted(frees)
        frees = []
        grouped.append(entry)
    return grouped + sorted(frees)


def without_frames(value):
    """Segments and blocks without their stack frames (neither run records any)."""
    if isinstance(value, list):
        return [without_frames(v) for v in value]
    if isinstance(value, dict):
        return {k: without_frames(v) for k, v in value.items() if k != "frames"}
    return value


CASES = [("gpt2", 1, ""), ("resnet", 2, ""), ("unet", 1, ""), ("gpt2", 1, "expandable_segments:True")]


@pytest.fixture(scope="module")
def steps(simulated_card, tmp_path_factory):
    """The reports of each case under both allocators, run once per module."""
    done = {}

    def step(model, batch, conf):
        if (model, batch, conf) not in done:
            done[model, batch, conf] = step_under_both_allocators(
                simulated_card, tmp_path_factory.mktemp(model), model, batch, conf)
        return done[model, batch, conf]

    return step


def torch_release():
    return importlib.metadata.version("torch")


@pytest.mark.parametrize("model,batch,conf", CASES)
def test_a_training_step_runs_end_to_end_on_vramkit(steps, model, batch, conf):
    pytorch, ours = steps(model, batch, conf)
    assert ours["device"] == pytorch["device"] == "NVIDIA A100-SXM4-80GB"
    assert ours["boundary_errors"] == 0
    stats, segments = ours["stats"], ours["snapshot"]["segments"]
    assert stats["allocation.all.allocated"] > 100 and stats["num_alloc_retries"] == 0 and stats["num_ooms"] == 0
    assert stats["reserved_bytes.all.peak"] >= stats["allocated_bytes.all.peak"] >= stats["requested_bytes.all.peak"] > 0
    assert sum(s["total_size"] for s in segments) == stats["reserved_bytes.all.current"]
    assert sum(s["allocated_size"] for s in segments) == stats["allocated_bytes.all.current"]
    assert all(s["is_expandable"] == (conf == "expandable_segments:True") for s in segments)
    assert len(events(ours)) > 300
    settings = ours["snapshot"]["allocator_settings"]
    assert {key: pytorch["snapshot"]["allocator_settings"][key] for key in settings} == settings
    if model == "resnet":
        # 20 convolutions forward, 20 weight and 19 input gradients.
        for report in (pytorch, ours):
            assert report["extra"]["cudnn_enabled"] and report["extra"]["cudnn_executions"] >= 59, report["extra"]


@pytest.mark.parametrize("model,batch,conf", CASES)
def test_a_training_step_on_vramkit_matches_pytorchs_allocator(steps, model, batch, conf, request):
    if not vramkit._ext.follows_pytorch_rules(torch_release()) and not conf:
        # vramkit's C entry points follow the rules of PyTorch 2.10 and 2.11:
        # from 2.12 PyTorch breaks ties between free blocks of equal size in
        # different segments by age, not address, and under the driver's
        # top-down addresses the two pick different blocks. (With expandable
        # segments a stream's pool is one segment: no such ties.) Strict:
        # this fails once enable() follows the release it is loaded into.
        request.applymarker(pytest.mark.xfail(strict=True, reason=(
            f"torch {torch_release()} breaks size ties by age; vramkit's C entry points follow torch 2.11's rules")))
    pytorch, ours = steps(model, batch, conf)
    history = events(ours)
    assert history[-1][0] == "snapshot", "vramkit records its snapshot entry before copying the history"
    assert frees_as_multisets(history[:-1]) == frees_as_multisets(events(pytorch))
    # Frees in another order merge free blocks in another order: how often
    # a split block fell inactive (the running counts and peaks of
    # inactive_split*) follows the order; what is inactive at the end does not.
    reordered = history[:-1] != events(pytorch)
    by_order = lambda key: reordered and key.startswith("inactive_split") and not key.endswith(".current")
    differing = {key: (value, ours["stats"].get(key)) for key, value in pytorch["stats"].items()
                 if ours["stats"].get(key) != value and not by_order(key)}
    assert not differing, differing
    # vramkit reports the newest release's keys: torch 2.13 added this one.
    assert {key: ours["stats"][key] for key in set(ours["stats"]) - set(pytorch["stats"])} in ({}, {"num_oom_rejections": 0})

    ordered = lambda report: sorted(without_frames(report["snapshot"]["segments"]), key=lambda s: s["address"])
    assert ordered(ours) == ordered(pytorch)
