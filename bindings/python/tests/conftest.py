"""Shared set-up: vramkit serves a simulated 8 GiB GPU in the test process
(its C entry points read VRAMKIT_DEVICE at first use), and the C ABI is
reached through ctypes exactly as PyTorch's CUDAPluggableAllocator does.

The allocator state is process-wide, so each test uses its own device
index; tests that need a fresh process (enable(), environment settings) run
a child interpreter through `run_python`.
"""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

os.environ["VRAMKIT_DEVICE"] = "sim:8GiB"

import vramkit  # noqa: E402  (after the environment is set)

MiB = 1 << 20


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


def run_python(code, env_changes=None, timeout=120):
    """Runs `code` in a fresh interpreter with this environment changed by
    `env_changes` (a value of None removes the variable); returns the
    completed process."""
    env = dict(os.environ)
    for key, value in (env_changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python():
    return run_python
