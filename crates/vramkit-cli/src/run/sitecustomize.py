"""vramkit run's start-up hook: records PyTorch's memory history on the simulated GPU.

Python imports this module at start-up because vramkit put its directory first on PYTHONPATH. It
imports nothing heavy: it waits for the program to import torch, then attaches PyTorch's
out-of-memory observer and, with VRAMKIT_RUN_RECORD=1, turns on PyTorch's own recording
(torch.cuda.memory._record_memory_history). The snapshot is dumped (torch.cuda.memory._dump_snapshot)
at the first out-of-memory error, else at exit, to $VRAMKIT_RUN_DIR/snapshot-<pid>.pickle; the
peaks, PyTorch's error message and the Python stacks at the error go to status-<pid>.json beside
it (all a --batch search needs: its runs record nothing, as dumping a snapshot takes seconds). Then the
sitecustomize module this one hides, if any, runs as it would have.
"""
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading

_DIR = os.environ.get("VRAMKIT_RUN_DIR")
_PID = os.getpid()
_status = {"pid": _PID, "torch": None, "cuda_used": False, "oom": None}


def _write_status():
    path = os.path.join(_DIR, "status-%d.json" % _PID)
    with open(path + ".tmp", "w") as f:
        json.dump(_status, f)
    os.replace(path + ".tmp", path)


def _stack(frame):
    """A Python stack, innermost frame first, as PyTorch's snapshots list frames; this file's left out."""
    frames = []
    while frame is not None:
        if frame.f_code.co_filename != __file__:
            frames.append({"filename": frame.f_code.co_filename, "line": frame.f_lineno, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames


def _peaks(torch):
    if torch.cuda.is_initialized():
        _status.update(cuda_used=True, peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                       peak_allocated_bytes=torch.cuda.max_memory_allocated())


def _start(torch):
    """Runs once torch is imported; a failure is reported, never raised into the program."""
    try:
        _record(torch)
    except Exception as e:
        _status["hook_error"] = "%s: %s" % (type(e).__name__, e)
        _write_status()


def _record(torch):
    """Recording, the observer, the message catcher, the exit dump."""
    snapshot = os.path.join(_DIR, "snapshot-%d.pickle" % _PID) if os.environ.get("VRAMKIT_RUN_RECORD") == "1" else None
    _status["torch"] = torch.__version__
    if snapshot:
        torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("VRAMKIT_RUN_MAX_ENTRIES", "1000000")))

    def dump():
        if snapshot:
            torch.cuda.memory._dump_snapshot(snapshot)
            _status["snapshot"] = snapshot

    def observer(device, requested, device_allocated, device_free):
        if _status["oom"] is not None:
            return
        # An allocation of the autograd engine's threads has no Python frames; the main thread's
        # stack says which line of the program (loss.backward(), say) was running.
        main = sys._current_frames().get(threading.main_thread().ident)
        _status["oom"] = {"requested_bytes": requested, "message": None, "stack": _stack(sys._getframe()),
                          "main_thread_stack": _stack(main)}
        _peaks(torch)
        dump()
        _write_status()

    torch._C._cuda_attach_out_of_memory_observer(observer)

    # PyTorch builds its message after the observers ran; the error's constructor sees it, whether
    # the program catches the error or not.
    error = torch.OutOfMemoryError
    init = error.__init__

    def keep_message(self, *args, **kwargs):
        if _status["oom"] is not None and _status["oom"]["message"] is None and args:
            _status["oom"]["message"] = str(args[0])
            _write_status()
        init(self, *args, **kwargs)

    error.__init__ = keep_message

    def at_exit():
        # The program's own code has finished: a crash after this is in the interpreter's or a
        # library's teardown, not in the program.
        _status["exiting"] = True
        _peaks(torch)
        if _status["oom"] is None and _status["cuda_used"]:
            dump()
        _write_status()

    # Registered after torch's own exit handlers, so it runs before them.
    import atexit
    atexit.register(at_exit)
    _write_status()


class _AfterTorch:
    """A meta path finder that runs _start once the module torch has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _start(module)

        spec.loader.exec_module = exec_module
        return spec


def _chain():
    """Runs the sitecustomize module that would have run without vramkit's directory on the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if _DIR:
    if "torch" in sys.modules:
        _start(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorch())
_chain()
