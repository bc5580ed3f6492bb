"""vramkit inside real PyTorch on a real GPU. Skipped unless PyTorch is
installed and sees a CUDA device; each check runs in a fresh process,
since the allocator swap must come before CUDA is initialised."""

import importlib.util

import pytest


def cuda_available():
    if importlib.util.find_spec("torch") is None:
        return False
    import subprocess
    import sys

    probe = subprocess.run(
        [sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
        capture_output=True,
        timeout=300,
    )
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not cuda_available(), reason="needs PyTorch with a CUDA GPU")

TRAIN = """
import torch, vramkit
vramkit.torch.enable({conf!r})
vramkit.record_memory_history()
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
side = torch.cuda.Stream()
for step in range(3):
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.cuda.stream(side):
        y = torch.empty(8 << 20, device="cuda").fill_(1.0)
    y.record_stream(torch.cuda.current_stream())
    del y
torch.cuda.synchronize()
stats = vramkit.memory_stats()
assert stats["allocation.all.allocated"] > 10, stats
assert vramkit.memory_allocated() > 0
assert vramkit.max_memory_reserved() >= vramkit.memory_reserved() > 0
assert "PyTorch CUDA memory summary" in vramkit.memory_summary()
snap = vramkit.snapshot()
assert snap["segments"] and all(s["is_expandable"] == {expandable} for s in snap["segments"]), snap["segments"]
actions = {{e["action"] for e in snap["device_traces"][0]}}
assert {{"alloc", "free_requested"}} <= actions, actions
assert vramkit.boundary_errors() == 0
del model, optimizer, x, loss
before = vramkit.memory_reserved()
torch.cuda.empty_cache()  # reaches vramkit through the reset hook
assert vramkit.memory_reserved() < before, (before, vramkit.memory_reserved())
vramkit.empty_cache()
print("ok", vramkit.max_memory_reserved())
"""


@pytest.mark.parametrize("conf,expandable", [("", False), ("expandable_segments:True", True)])
def test_pytorch_trains_on_vramkit(python, conf, expandable):
    result = python(TRAIN.format(conf=conf, expandable=expandable), {"VRAMKIT_DEVICE": None}, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok"), result.stdout


def test_enable_after_the_first_cuda_tensor_is_refused(python):
    result = python(
        """
        import torch, vramkit
        torch.zeros(1, device="cuda")
        try:
            vramkit.torch.enable()
        except RuntimeError as e:
            assert "before PyTorch initialises CUDA" in str(e), e
            print("ok")
        """,
        {"VRAMKIT_DEVICE": None},
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"
