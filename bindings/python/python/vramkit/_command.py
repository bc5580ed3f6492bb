"""The ``vramkit`` command, as this package ships it: the command-line tool's
own binary (``vramkit/_bin/vramkit``, built from ``crates/vramkit-cli``), so
every subcommand behaves exactly as in a ``cargo install``; and the
simulated CUDA stacks ``vramkit run`` puts a program on
(``vramkit/_simgpu``), compiled when the wheel was built.

:func:`main` is the console script: it points the binary at the shipped
stacks and becomes it (``exec``), so exit codes, signals and progress bars
are the binary's own. :func:`run` is ``vramkit run`` for Python code.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _vramkit as _ext

PathLike = Union[str, "os.PathLike[str]"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_SHIPPED = os.path.join(_PACKAGE, "_simgpu")


def executable() -> str:
    """The path of the ``vramkit`` binary in this package."""
    path = os.path.join(_PACKAGE, "_bin", "vramkit")
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"this vramkit package has no command-line tool ({path} is missing or not executable): "
            "reinstall it with `pip install --force-reinstall vramkit`"
        )
    return path


def environment() -> Dict[str, str]:
    """This process's environment, plus where the stacks shipped in this
    package are (unless the caller named others)."""
    env = dict(os.environ)
    env.setdefault(_ext.SIMGPU_SHIPPED_ENV, _SHIPPED)
    return env


def main() -> None:
    """The ``vramkit`` console script."""
    try:
        path = executable()
    except RuntimeError as error:
        print(f"vramkit: {error}", file=sys.stderr)
        sys.exit(2)
    os.execve(path, ["vramkit", *sys.argv[1:]], environment())


def run(
    command: Union[PathLike, Sequence[PathLike]],
    *,
    gpu: Optional[str] = None,
    conf: Optional[str] = None,
    batch: Optional[str] = None,
    reserve: Union[None, int, str] = None,
    output: Optional[PathLike] = None,
    python: Optional[PathLike] = None,
    max_candidates: Optional[int] = None,
) -> Dict[str, Any]:
    """``vramkit run``: runs ``command`` on a simulated GPU with PyTorch's own
    allocator deciding, and returns what the command prints with ``--json``
    (the card, each run's peak reserved memory and whether it fit, the
    diagnosis, the best ``PYTORCH_CUDA_ALLOC_CONF`` for the card and, with
    ``batch``, the largest value that fits).

    ``command`` is a script (run by this interpreter) or a whole command
    line (``["python", "train.py", "--steps", "2"]``). The options are
    ``vramkit run``'s: ``gpu`` a preset (``"t4"``, ``"a100-80gb"``, ...) or
    a size (``"24GiB"``); ``conf`` a ``PYTORCH_CUDA_ALLOC_CONF``;
    ``batch`` ``"VAR=LO..HI"`` or ``"VAR=LIST"``; ``reserve`` memory taken
    outside PyTorch (bytes or ``"1GiB"``); ``output`` where to keep the
    snapshot; ``python`` the program's interpreter when the command does
    not start with it.

    The program's own output and vramkit's progress go to this process's
    stderr. A program that runs out of memory is a result, not an error.
    Raises ``ValueError`` for input the command refuses (exit status 2: a
    bad option, a torch release the simulated GPU cannot serve), with its
    message, and ``RuntimeError`` when it fails otherwise.
    """
    if isinstance(command, (str, os.PathLike)):
        command = [sys.executable, command]
    argv: List[str] = [executable(), "run", "--json"]
    options = {"--gpu": gpu, "--conf": conf, "--batch": batch, "--reserve": reserve,
               "--output": output, "--python": python, "--max-candidates": max_candidates}
    for flag, value in options.items():
        if value is not None:
            argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    argv += ["--", *(os.fspath(part) for part in command)]
    status, stdout, stderr_tail = _run_echoing_stderr(argv)
    report = _json_object(stdout)
    if report is not None and status in (0, 1):
        return report
    message = "\n".join(stderr_tail).strip() or f"exit status {status}"
    if message.startswith("vramkit: "):
        message = message[len("vramkit: "):]
    if status == 2:
        raise ValueError(message)
    raise RuntimeError(f"vramkit run failed ({message})")


def _run_echoing_stderr(argv: List[str], keep: int = 20):
    """Runs ``argv`` with the shipped stacks; copies its stderr to ours as
    it comes. Returns (exit status, stdout, the last ``keep`` stderr lines)."""
    process = subprocess.Popen(argv, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace")
    tail: List[str] = []

    def echo() -> None:
        for line in process.stderr:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
            del tail[:-keep]

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    stdout = process.stdout.read()
    status = process.wait()
    reader.join()
    return status, stdout, tail


def _json_object(text: str) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def simulated_gpu_env(gpu: str) -> Dict[str, str]:
    """The environment variables that run a program of this interpreter on
    the simulated ``gpu`` shipped in this package, without ``vramkit run``'s
    recording (for a program that swaps in vramkit's allocator itself).
    Reads which CUDA build of torch this interpreter has without importing
    it; raises ``RuntimeError`` naming the torch release when the shipped
    stacks cannot serve it, ``ValueError`` for an unknown ``gpu``.

    Example: ``subprocess.run([sys.executable, "train.py"],
    env={**os.environ, **vramkit.simulated_gpu_env("l4")})``."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{sys.executable} has no torch to run on the simulated GPU")
    version_file = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    found: Dict[str, Any] = {}
    with open(version_file) as f:
        exec(compile(f.read(), version_file, "exec"), found)
    release = f"torch {found.get('__version__')} ({os.path.dirname(version_file)})"
    cuda = found.get("cuda") or ""
    served = sorted(name[len("cuda"):] for name in os.listdir(_SHIPPED) if name.startswith("cuda"))
    major = cuda.split(".")[0]
    if major not in served:
        build = f"built for CUDA {cuda}" if cuda else "a CPU-only build"
        raise RuntimeError(
            f"{release} is {build}; the simulated GPU shipped here serves torch built for CUDA "
            f"{' and '.join(served)}: install PyTorch's default Linux wheel of 2.4 or later"
        )
    requires = importlib.metadata.requires("torch") or []
    return dict(_ext.simgpu_env(_SHIPPED, int(major), gpu, requires))
