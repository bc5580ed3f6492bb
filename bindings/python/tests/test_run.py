"""`vramkit run` as the package installs it, on a machine with no GPU, and
no C compiler or CUDA toolkit needed: the simulated CUDA stack shipped in
the wheel is installed into the user's cache on first use and the program
runs on it with PyTorch's own allocator deciding. `vramkit.run()` gives
the same from Python."""

import glob
import json
import os
import sys

import pytest

import vramkit
from conftest import run_command, run_python

MiB = 1 << 20

# Keeps BS tensors of 300 MiB: each is a segment of its own (PyTorch rounds
# large requests to 2 MiB), so BS of them reserve BS * 300 MiB, and a 1 GiB
# card holds three.
PROGRAM = """
import os, torch
kept = [torch.empty(300 << 20, dtype=torch.uint8, device="cuda") for _ in range(int(os.environ.get("BS", "2")))]
torch.cuda.synchronize()
"""


@pytest.fixture
def program(tmp_path, torch_on_simgpu):
    path = tmp_path / "keep.py"
    path.write_text(PROGRAM)
    return path


@pytest.fixture
def fresh_user(tmp_path, monkeypatch):
    """A user with an empty cache, no C compiler and no CUDA harness cache:
    whatever runs must come from the wheel."""
    home = tmp_path / "home"
    home.mkdir()
    changes = {"HOME": str(home), "XDG_CACHE_HOME": None, "CC": "/nonexistent/cc",
               "VRAMKIT_PYTORCH_CACHE": str(tmp_path / "no-cache"), "VRAMKIT_DEVICE": None, "BS": None}
    for key, value in changes.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    return home


def test_the_command_runs_a_program_on_the_shipped_stack(program, fresh_user):
    result = run_command(["run", "--json", "--gpu", "t4", "--", sys.executable, program], {"BS": "2"})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["gpu"]["name"] == "Tesla T4" and report["fits"] is True, report
    assert [r["peak_reserved_bytes"] for r in report["runs"]] == [2 * 300 * MiB], report["runs"]
    # Installed from the wheel's plain files, the runtime's other names linked again.
    installed = glob.glob(str(fresh_user / ".cache" / "vramkit" / "simgpu" / "cuda*-*" / "lib"))
    assert len(installed) == 1, installed
    assert os.readlink(os.path.join(installed[0], "libcuda.so.1")).startswith("libcudart.so.")
    assert not os.path.exists(fresh_user.parent / "no-cache"), "nothing was built"


def test_python_run_returns_the_figures_the_command_prints(program, fresh_user, monkeypatch):
    monkeypatch.setenv("BS", "3")
    command = run_command(["run", "--json", "--gpu", "1GiB", "--", sys.executable, program])
    assert command.returncode == 0, command.stderr
    report = vramkit.run(program, gpu="1GiB")
    expected = json.loads(command.stdout)
    assert report["runs"] == expected["runs"] and report["gpu"] == expected["gpu"], (report, expected)
    assert report["runs"][0]["peak_reserved_bytes"] == 3 * 300 * MiB


def test_python_run_finds_the_largest_batch_and_an_out_of_memory_is_a_result(program, fresh_user):
    report = vramkit.run(program, gpu="1GiB", batch="BS=1,2,3,4,5")
    assert report["batch"]["largest_fit"] == 3 and report["batch"]["smallest_oom"] == 4, report["batch"]
    by_value = {r["value"]: r for r in report["runs"] if r["conf"] == report["conf"]}
    assert by_value[3]["result"] == "fits" and by_value[3]["peak_reserved_bytes"] == 3 * 300 * MiB
    assert by_value[4]["result"] == "out of memory"
    assert by_value[4]["oom_message"].startswith("CUDA out of memory. Tried to allocate 300.00 MiB")


def test_bad_options_are_value_errors_with_the_commands_message(program, fresh_user):
    with pytest.raises(ValueError, match='no GPU preset or size "v100"'):
        vramkit.run(program, gpu="v100")
    with pytest.raises(ValueError, match="max_split_size_mb"):
        vramkit.run(program, conf="max_split_size_mb:1")


@pytest.mark.parametrize("version,cuda,says", [
    ("2.5.1+cpu", None, "is a CPU-only build"),
    ("2.2.0+cu118", "11.8", "11.8"),
])
def test_a_torch_the_simulated_gpu_cannot_serve_is_named(program, fresh_user, tmp_path, monkeypatch, version, cuda, says):
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "version.py").write_text(f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    with pytest.raises(ValueError) as error:
        vramkit.run(program)
    assert f"torch {version}" in str(error.value) and says in str(error.value), error.value
    result = run_command(["run", "--", sys.executable, program])
    assert result.returncode == 2 and f"torch {version}" in result.stderr, result.stderr
    child = run_python("import vramkit; vramkit.simulated_gpu_env('t4')", {"PYTHONPATH": str(fake.parent)})
    assert child.returncode != 0 and "RuntimeError: torch " + version in child.stderr, child.stderr
