"""A stand-in for the parts of PyTorch that `vramkit.torch.enable` touches,
so the swap can be tested without PyTorch or a GPU. It behaves as
PyTorch 2.x does: `change_current_allocator` refuses once CUDA is
initialised, and the pluggable allocator's native object has the hook
setters, each taking a function address."""

import ctypes
import sys
import types


class NativeAllocator:
    def __init__(self):
        self.hooks = {}

    def __getattr__(self, name):
        if name.startswith("set_") and name.endswith("_fn"):
            return lambda address: self.hooks.__setitem__(name, address)
        raise AttributeError(name)


class CUDAPluggableAllocator:
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        # What PyTorch does: load the library and take both symbols' addresses.
        library = ctypes.CDLL(path_to_so_file)
        self.path = path_to_so_file
        self.names = (alloc_fn_name, free_fn_name)
        self.addresses = tuple(ctypes.cast(getattr(library, n), ctypes.c_void_p).value for n in self.names)
        self._native = NativeAllocator()

    def allocator(self):
        return self._native


def make(initialized=False, swap_error=None):
    """A fake `torch` module: `torch.cuda.is_initialized()` returns
    `initialized`; `change_current_allocator` raises `swap_error` if given,
    else records the allocator in `torch.cuda.memory.current`."""
    torch = types.ModuleType("torch")
    cuda = types.SimpleNamespace()
    memory = types.SimpleNamespace(current=None, swaps=0)

    def change_current_allocator(allocator):
        memory.swaps += 1
        if swap_error is not None:
            raise swap_error
        if cuda.initialized:
            raise RuntimeError("Can't swap an already initialized allocator")
        memory.current = allocator

    memory.CUDAPluggableAllocator = CUDAPluggableAllocator
    memory.change_current_allocator = change_current_allocator
    cuda.initialized = initialized
    cuda.is_initialized = lambda: cuda.initialized
    cuda.current_device = lambda: 0
    cuda.memory = memory
    torch.cuda = cuda
    return torch


def install(**kwargs):
    torch = make(**kwargs)
    sys.modules["torch"] = torch
    return torch
