"""Swapping vramkit's allocator into PyTorch.

::

    import vramkit
    vramkit.torch.enable("expandable_segments:True")  # before the first CUDA tensor

After :func:`enable`, every CUDA tensor's memory comes from vramkit (through
``torch.cuda.memory.CUDAPluggableAllocator``); read the numbers with
``vramkit.memory_stats()``, ``vramkit.memory_summary()`` and
``vramkit.snapshot()``. ``torch.cuda.empty_cache()`` and
``Tensor.record_stream`` reach vramkit too, where the PyTorch build lets a
pluggable allocator set those hooks.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

from . import _vramkit as _ext

__all__ = ["enable", "is_enabled"]

_TOO_LATE = (
    "vramkit.torch.enable() must run before PyTorch initialises CUDA: PyTorch has already created "
    "its own CUDA allocator in this process and cannot swap it. Call vramkit.torch.enable() first "
    "thing in your program, before any tensor is put on the GPU (.cuda(), .to('cuda'), "
    "device='cuda') and before torch.cuda calls that initialise CUDA; to change settings after "
    "that, use vramkit.set_settings()."
)

# The allocator object handed to PyTorch, kept alive for the process (PyTorch
# holds the C++ side; the Python wrapper owns the ctypes library handle).
_installed: Optional[Any] = None


def is_enabled() -> bool:
    """Whether :func:`enable` has swapped vramkit into PyTorch in this process."""
    return _installed is not None


def enable(conf: Optional[str] = None) -> Any:
    """Makes vramkit PyTorch's CUDA allocator for this process.

    Must run before the first CUDA tensor (PyTorch refuses to swap an
    initialised allocator): put it at the top of the program. ``conf`` is a
    ``PYTORCH_CUDA_ALLOC_CONF``-style string (``"expandable_segments:True"``,
    ``"max_split_size_mb:128"``, ...) applied on top of the settings from
    ``VRAMKIT_ALLOC_CONF`` (else ``PYTORCH_CUDA_ALLOC_CONF``); it can also be
    changed later with ``vramkit.set_settings()``.

    Returns the ``torch.cuda.memory.CUDAPluggableAllocator`` installed.
    Calling it again only applies ``conf``.

    Raises ``RuntimeError`` when PyTorch is missing, when CUDA is already
    initialised, or when vramkit runs on its simulated device
    (``VRAMKIT_DEVICE=sim``); ``ValueError`` when ``conf`` is refused.
    """
    global _installed
    try:
        import torch
    except ImportError as error:
        raise RuntimeError(
            "vramkit.torch.enable() swaps PyTorch's CUDA allocator, but PyTorch is not installed "
            "in this environment (import torch failed); install torch, or use vramkit's other "
            "functions without it"
        ) from error

    if _installed is not None:
        if conf is not None:
            _set_settings(conf)
        return _installed

    if torch.cuda.is_initialized():
        raise RuntimeError(_TOO_LATE)
    backend = _ext.backend()
    if backend != "cuda":
        raise RuntimeError(
            f"vramkit is serving a simulated GPU in this process (backend {backend}, chosen by "
            "VRAMKIT_DEVICE), whose addresses PyTorch cannot use; unset VRAMKIT_DEVICE to give "
            "PyTorch real GPU memory"
        )
    _ext.select_backend("cuda")
    if conf is not None:
        _set_settings(conf)

    from . import library_path

    path = library_path()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "vramkit_malloc", "vramkit_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as error:
        if "already initialized" in str(error):
            raise RuntimeError(_TOO_LATE) from error
        raise
    _set_hooks(allocator, path)
    _installed = allocator
    return allocator


def _set_settings(conf: str) -> None:
    from . import set_settings

    set_settings(conf)


def _set_hooks(allocator: Any, path: str) -> None:
    """Points the pluggable allocator's optional hooks at vramkit's entry
    points, where this PyTorch has them: ``empty_cache`` (reset hook),
    ``record_stream``, ``set_per_process_memory_fraction``."""
    native = allocator.allocator() if callable(getattr(allocator, "allocator", None)) else None
    if native is None:
        return
    library = ctypes.CDLL(path)
    hooks = {
        "set_reset_fn": "vramkit_empty_cache",
        "set_record_stream_fn": "vramkit_record_stream",
        "set_memory_fraction_fn": "vramkit_set_memory_fraction",
    }
    for setter, symbol in hooks.items():
        set_hook = getattr(native, setter, None)
        if callable(set_hook):
            set_hook(ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value)
