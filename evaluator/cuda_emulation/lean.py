"""The lean `native.load_cuda` path executed by the CPU emulation: a plain shared library, no torch build.

The candidate's source (`extern "C"` kernels, no torch headers) is rewritten (`rewrite.rewrite`) and
compiled by g++ with the emulation's headers into a shared library (only c10's small headers and
libc10, for the half types and the guarded allocator: no `torch/extension.h`, a few seconds), cached
by content in the build cache. For each `extern "C"` kernel the library has a launch entry
(`lean.h`), and `EmulatedModule.get_function(name)` gives a callable with the real module's calling
convention, `kernel(grid, block, args, shared_mem=0, stream=None)`: Python numbers are typed by the
kernel's signature exactly as `native.typed_args` types them for CuPy (the rest as CuPy does: int as
int64, float as float64), a tensor or a `data_ptr()` is a pointer, and parameter i is read from
argument i's bytes as the kernel's own type, as cuLaunchKernel reads them. A launch that fails (a
launch error, a fault of a running kernel, the sticky error after one) raises `CudaEmulationError`.

`cupy_stand_in` is the small part of CuPy a lean candidate touches around its launches (streams,
scalar types), for a worker where CuPy is not installed (CuPy needs a GPU).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy
from agentforge.evaluator import build_cache, native
from agentforge.evaluator.cuda_emulation.build import EMULATION_CFLAGS, INCLUDE_DIR, _runtime_version
from agentforge.evaluator.cuda_emulation.rewrite import NeedsGpu, needs_fibers, rewrite, strip_comments

__all__ = ["CudaEmulationError", "EmulatedModule", "NeedsGpu", "load_cuda_emulated"]

KIND = "lean-emu"
MESSAGE_BYTES = 2048


class CudaEmulationError(RuntimeError):
    """A CUDA error of an emulated lean launch (CuPy raises CUDADriverError on a GPU)."""


def _torch_dirs() -> tuple[Path, Path]:
    import torch

    root = Path(torch.__file__).resolve().parent
    return root / "include", root / "lib"


def extern_c_kernels(source: str) -> list[str]:
    """The `__global__` functions of `source` with C linkage (the ones `get_function` finds by name)."""
    text = strip_comments(source)
    blocks = []
    for match in re.finditer(r'extern\s+"C"\s*\{', text):
        depth, i = 0, match.end() - 1
        for i in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
        blocks.append((match.end(), i))
    names = []
    for match in native._KERNEL.finditer(text):
        head = text[:match.start()]
        declaration = head[max(head.rfind(";"), head.rfind("}"), head.rfind("{")) + 1:]
        inside = any(start <= match.start() < end for start, end in blocks)
        if (inside or re.search(r'extern\s+"C"', declaration)) and "template" not in declaration:
            names.append(match.group(1))
    return list(dict.fromkeys(names))


def emulated_source(source: str) -> tuple[str, list[str]]:
    """The host C++ of a lean module (raises NeedsGpu) and its `extern "C"` kernels."""
    plain = not needs_fibers([source])
    kernels = extern_c_kernels(source)
    entries = "".join(f"AGENTFORGE_LEAN_KERNEL({k}, {'true' if plain else 'false'})\n" for k in kernels)
    text = (f"// agentforge CUDA emulation runtime {_runtime_version(lean=True)}\n"
            '#include "agentforge_emu/runtime.h"\n#include "agentforge_emu/lean.h"\n'
            f"{rewrite(source, plain)}\n{entries}")
    return text, kernels


def build_library(name: str, source: str, cxx: str = "g++") -> tuple[Path, list[str]]:
    """The emulated library of a lean source (cached by content), recorded in `native.BUILD_EVENTS`."""
    text, kernels = emulated_source(source)
    include, lib = _torch_dirs()
    flags = ["-std=c++17", "-fPIC", "-shared", *EMULATION_CFLAGS, f"-I{INCLUDE_DIR}", f"-I{include}"]
    libs = [f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}"]
    key = build_cache.build_key(KIND, [text], [*flags, *libs], native._compiler_id(cxx))
    target = build_cache.entry(KIND, key)
    library = target.folder / "kernel.so"
    started = time.perf_counter()
    record = {"cuda": source}
    if target.ready and library.exists():
        native.BUILD_EVENTS.append(native.BuildEvent(KIND, name, True, time.perf_counter() - started, True,
                                                     sources=record, flags=tuple(flags)))
        return library, kernels
    staging = build_cache.staging_dir(KIND)
    (staging / "kernel.cpp").write_text(text)
    command = [cxx, *flags, "kernel.cpp", "-o", "kernel.so", *libs]
    proc = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=600)
    log = f"$ {' '.join(command)}\n{proc.stdout}{proc.stderr}"
    ok = proc.returncode == 0
    native.BUILD_EVENTS.append(native.BuildEvent(KIND, name, ok, time.perf_counter() - started, False, log,
                                                 record, tuple(flags)))
    if not ok:
        raise native.BuildError(f"the CPU emulation's g++ build of {name} failed (exit {proc.returncode})", log)
    build_cache.publish(staging, target)
    return library, kernels


def _grid(value: Any, what: str) -> tuple[int, int, int]:
    if not isinstance(value, tuple):  # CuPy's Function takes tuples only
        raise TypeError(f"{what} must be a tuple of up to 3 ints, got {type(value).__name__}")
    if not 1 <= len(value) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {len(value)}")
    dims = [int(v) for v in value] + [1] * (3 - len(value))
    if any(d < 0 or d >= 2**32 for d in dims):
        raise ValueError(f"{what} {value} is out of range")
    return dims[0], dims[1], dims[2]


def _arg_bytes(value: Any) -> bytes:
    """The bytes a launch passes for one argument, as CuPy passes them."""
    if value is None:
        return bytes(8)
    if hasattr(value, "data_ptr") and callable(value.data_ptr):  # a tensor: its (CPU) data pointer
        return numpy.uint64(value.data_ptr()).tobytes()
    if isinstance(value, numpy.ndarray):
        raise TypeError("Unsupported type <class 'numpy.ndarray'>: a host array cannot be a kernel argument")
    if isinstance(value, numpy.generic):
        return value.tobytes()
    if isinstance(value, bool):
        return numpy.bool_(value).tobytes()
    if isinstance(value, int):
        return numpy.int64(value).tobytes()
    if isinstance(value, float):
        return numpy.float64(value).tobytes()
    if isinstance(value, complex):
        return numpy.complex128(value).tobytes()
    raise TypeError(f"Unsupported type {type(value)}")


class EmulatedKernel:
    """One kernel of an emulated lean module, called as CuPy's RawKernel is."""

    def __init__(self, library: ctypes.CDLL, name: str, types: Sequence[str | None]):
        self.name, self._types = name, tuple(types)
        self._launch = getattr(library, f"agentforge_launch_{name}")
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_size_t]
        params = getattr(library, f"agentforge_params_{name}")
        params.restype = ctypes.c_int
        sizes = (ctypes.c_size_t * 64)()
        count = params(sizes, 64)
        self.param_sizes = tuple(sizes[i] for i in range(min(count, 64)))
        self.kernel = self  # as `native.TypedModule`'s launches carry theirs

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], *, shared_mem: int = 0, stream: Any = None,
                 enable_cooperative_groups: bool = False) -> None:
        dims = (*_grid(grid, "grid"), *_grid(block, "block"))
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"args must be a tuple of kernel arguments, got {type(args).__name__}")
        if int(shared_mem) < 0:
            raise ValueError(f"shared_mem must not be negative, got {shared_mem}")
        values = native.typed_args(tuple(args), self._types)  # the real path's typing, unchanged
        if len(values) != len(self.param_sizes):
            raise TypeError(f"kernel {self.name} takes {len(self.param_sizes)} arguments, {len(values)} given "
                            "(on a GPU the launch would read parameters that were not passed)")
        buffers = []
        for value, size in zip(values, self.param_sizes, strict=True):
            raw = _arg_bytes(value)
            buffers.append(ctypes.create_string_buffer(raw, max(len(raw), size, 16)))
        pointers = (ctypes.c_void_p * max(1, len(buffers)))(*[ctypes.addressof(b) for b in buffers])
        message = ctypes.create_string_buffer(MESSAGE_BYTES)
        code = self._launch(*dims, int(shared_mem), pointers, message, MESSAGE_BYTES)
        if code != 0:
            raise CudaEmulationError(message.value.decode(errors="replace") or f"CUDA error {code}")


class EmulatedModule:
    """What `native.load_cuda` returns, its kernels executed by the CPU emulation."""

    def __init__(self, library: Path, kernels: Sequence[str], signatures: dict[str, tuple[str | None, ...]]):
        self.path, self._kernels, self._signatures = library, set(kernels), signatures
        self._library = ctypes.CDLL(str(library))

    def get_function(self, name: str) -> EmulatedKernel:
        if name not in self._kernels:
            raise CudaEmulationError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name} (a kernel is found by "
                                     'its name when it is declared extern "C")')
        return EmulatedKernel(self._library, name, self._signatures.get(name, ()))

    def device_reset(self) -> None:
        """cudaDeviceReset: the sticky error of a faulted kernel cleared. The emulation's state is one
        per process (shared by every emulated library, as a GPU context is), so a fault spoils them all."""
        self._library.agentforge_device_reset()


def load_cuda_emulated(name: str, source: str, *_: Any, **__: Any) -> EmulatedModule:
    """The lean module `native.load_cuda(name, source)` gives on a GPU, executed by the emulation."""
    library, kernels = build_library(name, source)
    return EmulatedModule(library, kernels, native.kernel_signatures(source))


# ----- the part of CuPy a lean candidate uses around its launches --------------------------------
class _Stream:
    """A CUDA stream of the emulation: every launch has finished when it returns."""

    def __init__(self, *_: Any, **__: Any) -> None:
        self.ptr = 0

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *_: Any) -> None:
        return None

    def use(self) -> _Stream:
        return self

    def synchronize(self) -> None:
        return None


def cupy_stand_in() -> types.ModuleType:
    """A `cupy` module with streams that order nothing and numpy's scalar types (no arrays)."""
    cupy = types.ModuleType("cupy")
    cupy.__doc__ = "agentforge's CPU-emulation stand-in for CuPy: streams and scalar types only"
    for kind in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "bool_", "intp", "uintp", "complex64", "complex128"):
        setattr(cupy, kind, getattr(numpy, kind))
    cuda = types.ModuleType("cupy.cuda")
    cuda.ExternalStream = cuda.Stream = _Stream
    cuda.get_current_stream = lambda *_, **__: _Stream()
    cuda.Device = lambda *_, **__: types.SimpleNamespace(synchronize=lambda: None, id=0, use=lambda: None)
    cupy.cuda = cuda
    return cupy


def install_cupy_stand_in() -> None:
    """Make `import cupy` give the stand-in in this process, where CuPy is not installed."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        stand_in = cupy_stand_in()
        sys.modules["cupy"], sys.modules["cupy.cuda"] = stand_in, stand_in.cuda
