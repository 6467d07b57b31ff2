"""Building candidate kernels: the lean C++ path, and a cached `load_inline`.

Two ways for a candidate to build native code, both recorded in `BUILD_EVENTS` for the
evaluator's build stage:

* `load_cpp(name, source)`: the lean CPU path. An `extern "C"` C++ source compiled by g++
  without `torch/extension.h` (about 0.1 s instead of 15-30 s on two cores) and loaded with
  ctypes. The candidate passes `tensor.data_ptr()` and sizes.
* `cached_load_inline(...)`: KernelBench's `torch.utils.cpp_extension.load_inline`, unchanged in
  behaviour, keyed by a hash of sources and flags so a kernel is never built twice. The sandbox
  child swaps it in for torch's while a candidate module executes.

* `load_cuda(name, source)`: the lean CUDA path. A kernel source without torch headers,
  compiled by nvcc to a cubin for the local GPU (about a second; cached) and loaded with CuPy's
  `RawModule`; the candidate launches it on torch's current stream with `data_ptr()`s.

Build errors raise `BuildError` carrying the compiler's log.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.evaluator import build_cache

DEFAULT_CXX_FLAGS = ("-O3", "-std=c++17", "-fPIC", "-shared", "-march=native")
# --use_fast_math and friends change results; the evaluator pins flags so they cannot sneak in.
FORBIDDEN_FLAGS = (
    "-ffast-math", "-Ofast", "--use_fast_math", "-use_fast_math", "-funsafe-math-optimizations",
    "-fassociative-math", "-freciprocal-math", "-ffinite-math-only", "-fno-signed-zeros",
    "-prec-div=false", "--prec-div=false", "-prec-sqrt=false", "--prec-sqrt=false", "-ftz=true", "--ftz=true",
)


class BuildError(RuntimeError):
    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


@dataclass
class BuildEvent:
    kind: str  # lean-cpp | load_inline | compile-only-nvcc
    name: str
    ok: bool
    seconds: float
    cached: bool
    log: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()


BUILD_EVENTS: list[BuildEvent] = []


def _check_flags(flags: Sequence[str]) -> None:
    """Refuse numerics-changing flags, also when several are packed into one string or passed
    through -Xcompiler / -Xptxas lists."""
    words = [w for flag in flags for part in str(flag).split() for w in part.split(",")]
    bad = [w for w in words if w in FORBIDDEN_FLAGS]
    if bad:
        raise BuildError(f"forbidden compiler flags {bad}: they change numerics", log=" ".join(flags))


def _compiler_id(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return cxx


def load_cpp(
    name: str, source: str, extra_cflags: Sequence[str] = (), openmp: bool = True, cxx: str = "g++",
) -> ctypes.CDLL:
    """Compile an `extern "C"` C++ source into a shared library (cached) and load it."""
    flags = [*DEFAULT_CXX_FLAGS, *(["-fopenmp"] if openmp else []), *extra_cflags]
    _check_flags(flags)
    key = build_cache.build_key("lean-cpp", [source], flags, _compiler_id(cxx))
    target = build_cache.entry("lean-cpp", key)
    library = target.folder / "kernel.so"  # the key covers the source, not the name
    started = time.perf_counter()
    if target.ready and library.exists():
        BUILD_EVENTS.append(BuildEvent("lean-cpp", name, True, time.perf_counter() - started, True,
                                       sources={"cpp": source}, flags=tuple(flags)))
        return ctypes.CDLL(str(library))
    staging = build_cache.staging_dir("lean-cpp")
    (staging / "kernel.cpp").write_text(source)
    command = [cxx, *flags, "kernel.cpp", "-o", "kernel.so"]
    proc = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=600)
    log = f"$ {' '.join(command)}\n{proc.stdout}{proc.stderr}"
    seconds = time.perf_counter() - started
    BUILD_EVENTS.append(BuildEvent("lean-cpp", name, proc.returncode == 0, seconds, False, log,
                                   {"cpp": source}, tuple(flags)))
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(f"g++ failed to build {name} (exit {proc.returncode})", log)
    build_cache.publish(staging, target)
    return ctypes.CDLL(str(library))


def device_arch() -> str:
    """sm_XY of the current CUDA device, with Hopper's `a` suffix (wgmma, TMA need it)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def load_cuda(name: str, source: str, arch_override: str | None = None, extra_cuda_cflags: Sequence[str] = ()) -> Any:
    """Compile a CUDA source (no torch headers) to a cubin, cached, and load it with CuPy."""
    from agentforge.evaluator.compile_only import compile_cuda_source

    started = time.perf_counter()
    arch = arch_override or device_arch()
    ok, log, cubin = compile_cuda_source(source, name, arch, list(extra_cuda_cflags), torch_headers=False)
    BUILD_EVENTS.append(BuildEvent("lean-nvcc", name, ok, time.perf_counter() - started, False, log,
                                   {"cuda": source, "cubin": str(cubin)}, (arch,)))
    if not ok:
        raise BuildError(f"nvcc failed to compile {name} for {arch}", log)
    import cupy

    return cupy.RawModule(path=str(cubin))


def cached_load_inline(name: str, cpp_sources: Any = (), cuda_sources: Any = (), functions: Any = None,
                       extra_cflags: Any = None, extra_cuda_cflags: Any = None, extra_ldflags: Any = None,
                       extra_include_paths: Any = None, build_directory: Any = None, verbose: bool = False,
                       with_cuda: Any = None, is_python_module: bool = True, with_pytorch_error_handling: bool = True,
                       keep_intermediates: bool = True, use_pch: bool = False, **kwargs: Any) -> Any:
    """torch's `load_inline` with a content-addressed build directory and a recorded log."""
    cpp = _as_list(cpp_sources)
    cuda = _as_list(cuda_sources)
    flags = [*(extra_cflags or []), "|", *(extra_cuda_cflags or []), "|", *(extra_ldflags or [])]
    _check_flags(flags)
    import torch

    key = build_cache.build_key("load_inline", [*cpp, "\0cuda\0", *cuda, repr(functions)], flags,
                                f"torch-{torch.__version__}")
    target = build_cache.entry("load_inline", key)
    target.folder.mkdir(parents=True, exist_ok=True)
    was_cached = target.ready
    # A module name unique to the content: two candidates named "relu_ext" never collide.
    unique_name = f"{name}_{key[:12]}"
    started = time.perf_counter()
    event = BuildEvent("load_inline", name, False, 0.0, was_cached, sources={"cpp": "\n".join(cpp),
                       "cuda": "\n".join(cuda)}, flags=tuple(flags))
    BUILD_EVENTS.append(event)
    captured = None
    try:
        with _captured_build_output() as captured:
            module = _torch_load_inline()(
                unique_name, cpp_sources=cpp, cuda_sources=cuda or None, functions=functions,
                extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                extra_include_paths=extra_include_paths, build_directory=str(target.folder),
                verbose=True, with_cuda=with_cuda, is_python_module=is_python_module,
                with_pytorch_error_handling=with_pytorch_error_handling, keep_intermediates=keep_intermediates,
                use_pch=use_pch, **kwargs,
            )
    except Exception as exc:
        event.seconds = time.perf_counter() - started
        event.log = (captured.text() if captured else "") + f"\n{type(exc).__name__}: {exc}"
        raise BuildError(f"load_inline failed to build {name}", event.log) from exc
    event.ok, event.seconds, event.log = True, time.perf_counter() - started, captured.text()
    (target.folder / "READY").write_text("ok\n")
    return module


def _torch_load_inline() -> Any:
    """torch's own `load_inline`, never the redirect installed over it (which would call itself)."""
    from torch.utils import cpp_extension

    global _TORCH_LOAD_INLINE
    if _TORCH_LOAD_INLINE is None:
        current = cpp_extension.load_inline
        _TORCH_LOAD_INLINE = current if current is not cached_load_inline else None
    if _TORCH_LOAD_INLINE is None:
        raise RuntimeError("torch's load_inline is not known: the redirect was installed before it was saved")
    return _TORCH_LOAD_INLINE


_TORCH_LOAD_INLINE: Any = None


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


class _Captured:
    def __init__(self, path: Path):
        self.path = path

    def text(self) -> str:
        try:
            return self.path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""


@contextlib.contextmanager
def _captured_build_output() -> Iterator[_Captured]:
    """Capture the compiler output that torch's builder writes to fd 1/2 (ninja's subprocesses)."""
    import os
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="build-", suffix=".log", delete=False) as handle:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            yield _Captured(Path(handle.name))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


@contextlib.contextmanager
def load_inline_redirected() -> Iterator[None]:
    """While a candidate module executes, `torch.utils.cpp_extension.load_inline` builds
    through the cache. Restored afterwards, so the candidate cannot keep the swap."""
    from torch.utils import cpp_extension

    _torch_load_inline()  # saved before the swap
    original = cpp_extension.load_inline
    cpp_extension.load_inline = cached_load_inline
    try:
        yield
    finally:
        cpp_extension.load_inline = original
