"""Shared set-up: vramkit serves a simulated 8 GiB GPU in the test process
(its C entry points read VRAMKIT_DEVICE at first use), and the C ABI is
reached through ctypes exactly as PyTorch's CUDAPluggableAllocator does.

The allocator state is process-wide, so each test uses its own device
index; tests that need a fresh process (enable(), environment settings) run
a child interpreter through `run_python`.
"""

import ctypes
import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

os.environ["VRAMKIT_DEVICE"] = "sim:8GiB"

import vramkit  # noqa: E402  (after the environment is set)

MiB = 1 << 20

REPO = pathlib.Path(__file__).resolve().parents[3]
# The training steps vramkit-simgpu's own tests run (GPT-2-small, ResNet-18
# through cuDNN, a diffusion UNet), each printing or handing over its report
# through `common.run`.
MODEL_STEPS = REPO / "crates" / "vramkit-simgpu" / "tests" / "py"
REAL_TRACE = REPO / "data" / "traces" / "pytorch_snapshots" / "cs336_silmont2000__mem_snapshot.pickle"


class CAbi:
    """vramkit's C entry points, loaded from the extension module's path."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.vramkit_malloc.restype = ctypes.c_void_p
        self.lib.vramkit_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.lib.vramkit_free.restype = None
        self.lib.vramkit_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.lib.vramkit_version.restype = ctypes.c_char_p

    def malloc(self, size, device, stream=0):
        return self.lib.vramkit_malloc(size, device, stream)

    def free(self, ptr, size, device, stream=0):
        self.lib.vramkit_free(ptr, size, device, stream)


@pytest.fixture(scope="session")
def cabi():
    return CAbi(vramkit.library_path())


def environment(env_changes=None):
    """This process's environment changed by `env_changes` (a value of None
    removes the variable)."""
    env = dict(os.environ)
    for key, value in (env_changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_python(code, env_changes=None, timeout=120):
    """Runs `code` in a fresh interpreter with this environment changed by
    `env_changes` (a value of None removes the variable); returns the
    completed process."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environment(env_changes),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python():
    return run_python


def vramkit_command():
    """The `vramkit` console script pip installed beside this interpreter."""
    return os.path.join(os.path.dirname(sys.executable), "vramkit")


def run_command(args, env_changes=None, timeout=300, cwd=None):
    """Runs the installed `vramkit` command with `args` in `environment(env_changes)`."""
    return subprocess.run([vramkit_command(), *map(str, args)], env=environment(env_changes), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.fixture(scope="session", autouse=True)
def private_user_cache(tmp_path_factory):
    """The simulated GPU the package ships is installed into the user's
    cache on first use: the tests' goes to a temporary one."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("user-cache"))


@pytest.fixture(scope="session")
def torch_on_simgpu():
    """Skips unless this environment has torch (to run on the simulated GPU
    the package ships); with VRAMKIT_REQUIRE_SIMGPU=1 a missing torch fails."""
    if importlib.util.find_spec("torch") is None:
        why = "needs torch installed in this environment (bindings/python/ci.sh installs the CUDA wheel)"
        if os.environ.get("VRAMKIT_REQUIRE_SIMGPU") == "1":
            pytest.fail(why + ", and VRAMKIT_REQUIRE_SIMGPU=1 requires it")
        pytest.skip(why)
