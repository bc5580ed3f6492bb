"""`vramkit.torch.enable()` against a fake PyTorch (tests/fake_torch.py):
every way it must refuse, in this process, and the successful swap in a
fresh process (the swap is once per process, and this process serves the
simulated device, which enable() rightly refuses)."""

import os
import sys

import pytest

import fake_torch
import vramkit

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def no_real_torch(monkeypatch):
    # Whatever is installed, these tests see only the fake (or no) torch.
    monkeypatch.delitem(sys.modules, "torch", raising=False)


def test_without_pytorch_enable_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(RuntimeError, match="PyTorch is not installed") as info:
        vramkit.torch.enable()
    assert isinstance(info.value.__cause__, ImportError)
    assert not vramkit.torch.is_enabled()


def test_after_cuda_is_initialised_enable_says_what_to_do(monkeypatch):
    torch = fake_torch.make(initialized=True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(RuntimeError, match="must run before PyTorch initialises CUDA") as info:
        vramkit.torch.enable("expandable_segments:True")
    assert "before any tensor is put on the GPU" in str(info.value)
    assert torch.cuda.memory.swaps == 0, "no swap was tried"
    assert not vramkit.torch.is_enabled()


def test_pytorchs_own_refusal_becomes_the_same_clear_error(monkeypatch):
    # CUDA not initialised as far as is_initialized() knows, but the
    # allocator is (PyTorch's own check is the last word).
    refusal = RuntimeError("Can't swap an already initialized allocator")
    monkeypatch.setitem(sys.modules, "torch", fake_torch.make(swap_error=refusal))
    monkeypatch.setattr(vramkit._ext, "backend", lambda: "cuda")
    monkeypatch.setattr(vramkit._ext, "select_backend", lambda name: None)
    with pytest.raises(RuntimeError, match="must run before PyTorch initialises CUDA") as info:
        vramkit.torch.enable()
    assert info.value.__cause__ is refusal
    assert not vramkit.torch.is_enabled()


def test_other_swap_failures_pass_through(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch.make(swap_error=RuntimeError("something else")))
    monkeypatch.setattr(vramkit._ext, "backend", lambda: "cuda")
    monkeypatch.setattr(vramkit._ext, "select_backend", lambda name: None)
    with pytest.raises(RuntimeError, match="something else"):
        vramkit.torch.enable()


def test_the_simulated_device_is_refused(monkeypatch):
    torch = fake_torch.make()
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(RuntimeError, match="VRAMKIT_DEVICE"):
        vramkit.torch.enable()
    assert torch.cuda.memory.swaps == 0


def test_enable_swaps_in_the_extension_module_with_its_hooks(python):
    result = python(
        f"""
        import ctypes, sys
        sys.path.insert(0, {TESTS!r})
        import fake_torch
        torch = fake_torch.install()
        import vramkit

        # A refused settings string installs nothing.
        try:
            vramkit.torch.enable("max_split_size_mb:1")
        except ValueError as e:
            assert "max_split_size_mb" in str(e), e
        else:
            raise AssertionError("bad settings were accepted")
        assert torch.cuda.memory.swaps == 0 and not vramkit.torch.is_enabled()

        allocator = vramkit.torch.enable("expandable_segments:True")
        assert torch.cuda.memory.current is allocator and vramkit.torch.is_enabled()
        assert allocator.path == vramkit.library_path()
        assert allocator.names == ("vramkit_malloc", "vramkit_free")
        assert all(allocator.addresses)
        lib = ctypes.CDLL(vramkit.library_path())
        address = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        assert allocator.allocator().hooks == {{
            "set_reset_fn": address("vramkit_empty_cache"),
            "set_record_stream_fn": address("vramkit_record_stream"),
            "set_memory_fraction_fn": address("vramkit_set_memory_fraction"),
        }}, allocator.allocator().hooks
        assert vramkit.backend() == "cuda"
        assert "expandable_segments:True" in vramkit.settings()

        # Again: no second swap, only the settings.
        assert vramkit.torch.enable("max_split_size_mb:64") is allocator
        assert torch.cuda.memory.swaps == 1
        assert "max_split_size_mb:64" in vramkit.settings()
        print("ok")
        """,
        {"VRAMKIT_DEVICE": None},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
