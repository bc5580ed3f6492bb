"""Tools for PyTorch memory snapshot files (``torch.cuda.memory._dump_snapshot``
or :func:`vramkit.dump_snapshot`): replay them under other settings, check
vramkit's simulator against them, diagnose and tune.

They run vramkit's replayer in this process on a simulated device; no GPU
and no PyTorch are needed.
"""

from __future__ import annotations

import errno
import json
import os
import re
from typing import Any, Dict, Optional, Union

from . import _vramkit as _ext

PathLike = Union[str, "os.PathLike[str]"]
Capacity = Union[None, int, str]

_UNITS = {"": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20,
          "G": 30, "GB": 30, "GIB": 30, "T": 40, "TB": 40, "TIB": 40}


def _capacity_bytes(capacity: Capacity) -> Optional[int]:
    """``None``, bytes as an ``int``, or a string like ``"24GiB"``/``"80G"``
    (powers of 1024)."""
    if capacity is None:
        return None
    if isinstance(capacity, bool):
        raise TypeError(f"capacity must be bytes or a string like '24GiB', not {capacity!r}")
    if isinstance(capacity, int):
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, not {capacity}")
        return capacity
    if isinstance(capacity, str):
        match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", capacity)
        if match and match.group(2).upper() in _UNITS:
            value = int(match.group(1)) << _UNITS[match.group(2).upper()]
            if value > 0:
                return value
        raise ValueError(f"bad capacity {capacity!r}: write bytes with an optional unit, e.g. '24GiB'")
    raise TypeError(f"capacity must be bytes or a string like '24GiB', not {type(capacity).__name__}")


def _existing_file(path: PathLike) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "no such snapshot file", path)
    return path


def replay(path: PathLike, conf: Optional[str] = None, capacity: Capacity = None) -> Dict[str, Any]:
    """Replays a snapshot file's trace, per device, twice: as recorded (the
    ground truth over time) and through vramkit's allocator under ``conf``
    (a ``PYTORCH_CUDA_ALLOC_CONF``-style string applied on top of the
    settings the file was recorded with), optionally limited to
    ``capacity`` bytes (``int``, or ``"24GiB"``).

    Returns a dict::

        {"recorded_settings": str, "settings": str, "capacity_bytes": int | None,
         "devices": [{"device": int, "has_events": bool,
                      "recorded": METRICS, "predicted": METRICS}, ...]}

    where METRICS holds ``peak_reserved_bytes``, ``peak_allocated_bytes``,
    ``peak_requested_bytes``, ``lower_bound_bytes``, ``utilization``,
    ``waste_bytes_at_peak``, ``peak_inactive_split_bytes``,
    ``largest_free_block_at_peak``, ``device_mallocs``, ``device_frees``,
    ``first_oom_event`` (``None`` when everything fit), ``oom_count``,
    ``events`` and a downsampled ``timeline``.

    Raises ``FileNotFoundError``, ``ValueError`` for bad ``conf`` or
    ``capacity``, ``RuntimeError`` when the trace cannot be replayed.
    """
    capacity_bytes = _capacity_bytes(capacity)
    if conf is not None and not isinstance(conf, str):
        raise TypeError(f"conf is a string like 'max_split_size_mb:128', not {type(conf).__name__}")
    return json.loads(_ext.replay_json(_existing_file(path), conf, capacity_bytes))


def verify(path: PathLike) -> Dict[str, Any]:
    """Checks vramkit's simulator against a snapshot file: replays each
    device's trace under the recorded settings and compares every
    allocation's address, the segment events and the end state with what
    PyTorch did.

    Returns ``{"recorded_settings": str, "passed": bool, "devices": [REPORT, ...]}``
    where REPORT holds ``device``, ``alloc_events``, ``placed_same``,
    ``match_rate``, ``segment_events_recorded``, ``segment_events_predicted``,
    ``segment_events_identical``, ``end_state_identical``, ``trace_cut``,
    ``first_divergence`` (``None`` or a dict with ``kind``, ``event_index``,
    ``expected``, ``got``, ``context``) and ``passed``.
    """
    return json.loads(_ext.verify_json(_existing_file(path)))


def doctor(path: PathLike) -> Dict[str, Any]:
    """Explains in plain words what is wrong with a snapshot's memory use
    (where reserved memory goes, fragmentation, cached but unusable memory,
    the allocation sites responsible, an out-of-memory error if one was
    recorded) and, when the snapshot has allocation events, which
    ``PYTORCH_CUDA_ALLOC_CONF`` to set.

    Returns ``{"devices": [DIAGNOSIS, ...]}``; each diagnosis has the numbers
    and its plain-words ``text`` (what ``vramkit doctor`` prints).
    """
    return json.loads(_ext.doctor_json(_existing_file(path)))


def tune(path: PathLike, capacity: Capacity = None) -> Dict[str, Any]:
    """Replays a snapshot's trace under dozens of allocator settings and
    ranks them: lowest peak reserved with no out-of-memory at ``capacity``
    (bytes or a string like ``"24GiB"``; default: the capacity the trace
    implies, else unlimited), ties to fewer device calls.

    Returns ``{"results": [RESULT per device], "worst_case": ...}``; each
    result has ``recommended``, ``best``, ``recorded``, ``lower_bound_bytes``
    and every ``candidate``.
    """
    capacity_bytes = _capacity_bytes(capacity)
    return json.loads(_ext.tune_json(_existing_file(path), capacity_bytes))


def report(path: PathLike, output: PathLike, capacity: Capacity = None, device: Optional[int] = None) -> str:
    """Writes the self-contained HTML page ``vramkit report`` writes for a
    snapshot (allocated and reserved over time under the recorded and the
    recommended settings, segment maps at each peak, the top allocation
    sites, the tune table and the doctor's text) to ``output``.

    ``device`` picks the device (default: the first with allocation
    events); ``capacity`` is as for :func:`tune`. Returns ``output`` as a
    string.
    """
    capacity_bytes = _capacity_bytes(capacity)
    if device is not None and (isinstance(device, bool) or not isinstance(device, int)):
        raise TypeError(f"device must be an int, not {type(device).__name__}")
    output = os.fspath(output)
    _ext.report_html(_existing_file(path), output, capacity_bytes, device)
    return output
