"""vramkit: a GPU caching allocator with PyTorch's semantics.

Swap it into PyTorch before the first CUDA tensor::

    import vramkit
    vramkit.torch.enable("expandable_segments:True")

then read its statistics, summary and snapshots with the functions here
(PyTorch's own ``torch.cuda.memory_stats()`` and ``_snapshot()`` do not work
under a pluggable allocator). They read the live allocator in this process:
the extension module ``vramkit._vramkit`` is also the library PyTorch loads.

The snapshot-file tools (:func:`replay`, :func:`verify`, :func:`doctor`,
:func:`tune`) work on files written by ``torch.cuda.memory._dump_snapshot``
or :func:`dump_snapshot`. :func:`run` runs a program on a simulated GPU and
says whether it fits (``vramkit run``; the package also installs the
``vramkit`` command).
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import sys
from typing import Any, Dict, Optional, Union

from . import _vramkit as _ext
from . import torch
from ._command import run, simulated_gpu_env
from ._files import doctor, replay, report, tune, verify

__version__: str = _ext.__version__

__all__ = [
    "backend",
    "boundary_errors",
    "doctor",
    "dump_snapshot",
    "empty_cache",
    "library_path",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "record_memory_history",
    "replay",
    "report",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "run",
    "set_settings",
    "settings",
    "simulated_gpu_env",
    "snapshot",
    "torch",
    "tune",
    "verify",
]

Device = Union[None, int, str, Any]


def library_path() -> str:
    """The shared library exporting ``vramkit_malloc``/``vramkit_free`` (and
    the rest of vramkit's C ABI), for ``CUDAPluggableAllocator``: this
    package's extension module itself."""
    return _ext.__file__


def _device_index(device: Device) -> int:
    """A device index from what PyTorch's memory functions accept: ``None``
    (the current device), an ``int``, ``"cuda"``/``"cuda:N"`` or a
    ``torch.device``."""
    if device is None:
        return _current_device()
    if isinstance(device, bool):
        raise TypeError(f"not a device: {device!r}")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda" or (index and not index.isdigit()):
            raise ValueError(f"not a CUDA device: {device!r} (expected an index, 'cuda' or 'cuda:N')")
        return int(index) if index else _current_device()
    kind = getattr(device, "type", None)
    if kind is not None:
        if kind != "cuda":
            raise ValueError(f"not a CUDA device: {device!r}")
        index = getattr(device, "index", None)
        return _current_device() if index is None else int(index)
    raise TypeError(f"not a device: {device!r} (expected an index, 'cuda:N' or a torch.device)")


def _current_device() -> int:
    """PyTorch's current device when it has initialised CUDA, else 0 (never
    initialises CUDA itself)."""
    torch_module = sys.modules.get("torch")
    cuda = getattr(torch_module, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return int(cuda.current_device())
    except Exception:  # a half-imported or mocked torch: fall back
        pass
    return 0


def memory_stats(device: Device = None) -> "collections.OrderedDict[str, int]":
    """``torch.cuda.memory_stats(device)`` of vramkit's allocator: every key
    PyTorch reports (``"allocated_bytes.all.current"``, ``"num_ooms"``,
    ...), sorted. All zero for a device vramkit has not served yet."""
    return collections.OrderedDict(_ext.memory_stats(_device_index(device)))


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """``torch.cuda.memory_summary(device, abbreviated)``: PyTorch's table."""
    return _ext.memory_summary(_device_index(device), bool(abbreviated))


def snapshot() -> Dict[str, Any]:
    """``torch.cuda.memory._snapshot()`` of vramkit's allocator: a dict with
    ``segments``, ``device_traces`` and ``allocator_settings``, in PyTorch's
    shape (pytorch.org/memory_viz opens it once pickled, see
    :func:`dump_snapshot`). ``device_traces`` holds events only while
    :func:`record_memory_history` is on."""
    value = json.loads(_ext.snapshot_json())
    for segment in value["segments"]:
        # PyTorch's pool id is a C++ pair, a tuple in Python.
        segment["segment_pool_id"] = tuple(segment["segment_pool_id"])
    # PyTorch's key order.
    return {key: value[key] for key in ("segments", "device_traces", "allocator_settings")}


def dump_snapshot(path: Union[str, "os.PathLike[str]"]) -> None:
    """``torch.cuda.memory._dump_snapshot(path)``: :func:`snapshot` pickled
    (protocol 4, which pytorch.org/memory_viz and vramkit's tools read)."""
    value = snapshot()
    with open(os.fspath(path), "wb") as f:
        pickle.dump(value, f, protocol=4)


def record_memory_history(enabled: bool = True, max_entries: Optional[int] = None, device: Device = None) -> None:
    """Starts (or, with ``enabled=False``, stops and clears) recording the
    allocator's events on ``device`` for :func:`snapshot`'s
    ``device_traces``, like ``torch.cuda.memory._record_memory_history``.
    ``max_entries`` bounds the ring buffer (``None``: unbounded). Stack
    frames are not recorded."""
    if max_entries is not None and max_entries <= 0:
        raise ValueError(f"max_entries must be positive or None, not {max_entries}")
    _ext.record_history(_device_index(device), bool(enabled), max_entries)


def empty_cache() -> None:
    """``torch.cuda.empty_cache()``: returns every wholly free cached segment
    (and the free pages of expandable segments) to the driver."""
    _ext.empty_cache()


def set_settings(conf: str) -> None:
    """Changes settings at run time with a ``PYTORCH_CUDA_ALLOC_CONF``-style
    string (``"max_split_size_mb:128,garbage_collection_threshold:0.8"``),
    for every device now and later. Only the keys named change. Raises
    ``ValueError`` naming the key and value when the string is refused;
    nothing changes then."""
    if not isinstance(conf, str):
        raise TypeError(f"settings are a string like 'max_split_size_mb:128', not {type(conf).__name__}")
    _ext.set_settings(conf)


def settings() -> str:
    """The settings in force, as a ``PYTORCH_CUDA_ALLOC_CONF`` string. They
    start from ``VRAMKIT_ALLOC_CONF``, else ``PYTORCH_CUDA_ALLOC_CONF``, else
    ``PYTORCH_ALLOC_CONF``, else PyTorch's defaults."""
    return _ext.settings()


def memory_allocated(device: Device = None) -> int:
    """``torch.cuda.memory_allocated(device)``: bytes of live blocks."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Device = None) -> int:
    """``torch.cuda.max_memory_allocated(device)``: peak of :func:`memory_allocated`."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Device = None) -> int:
    """``torch.cuda.memory_reserved(device)``: bytes held from the driver."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Device = None) -> int:
    """``torch.cuda.max_memory_reserved(device)``: peak of :func:`memory_reserved`."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Device = None) -> None:
    """``torch.cuda.reset_peak_memory_stats(device)``: peaks become current values."""
    _ext.reset_peak_stats(_device_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    """``torch.cuda.reset_accumulated_memory_stats(device)``."""
    _ext.reset_accumulated_stats(_device_index(device))


def backend() -> str:
    """Where vramkit's memory comes from: ``"cuda"``, or ``"sim:<bytes>"``
    when ``VRAMKIT_DEVICE=sim...`` chose the simulated GPU."""
    return _ext.backend()


def boundary_errors() -> int:
    """Misuse of the C entry points seen so far (bad frees and the like);
    each was refused or reported on stderr."""
    return _ext.boundary_errors()
