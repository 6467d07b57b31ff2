"""Building candidate kernels: the lean C++ path, and a cached `load_inline`.

Two ways for a candidate to build native code, both recorded in `BUILD_EVENTS` for the
evaluator's build stage:

* `load_cpp(name, source)`: the lean CPU path. An `extern "C"` C++ source compiled by g++
  without `torch/extension.h` (about 0.1 s instead of 15-30 s on two cores) and loaded with
  ctypes. The candidate passes `tensor.data_ptr()` and sizes.
* `cached_load_inline(...)`: KernelBench's `torch.utils.cpp_extension.load_inline`, unchanged in
  behaviour, keyed by a hash of sources and flags so a kernel is never built twice. The sandbox
  child swaps it in for torch's while a candidate module executes. Its C++ compile reads a
  precompiled `torch/extension.h` from the build cache (`extension_pch`), built once per
  compiler and flag set: parsing that header is most of a cold build.

* `load_cuda(name, source)`: the lean CUDA path. A kernel source without torch headers,
  compiled by nvcc to a cubin for the local GPU (about a second; cached) and loaded with CuPy's
  `RawModule`; the candidate launches it on torch's current stream with `data_ptr()`s.

What torch's own JIT build would run (`torch_build_plan`, `torch_inline_sources`) is read from
torch itself, so the compile-only verdict and the precompiled header follow the installed torch.

Build errors raise `BuildError` carrying the compiler's log.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import re
import resource
import shlex
import shutil
import subprocess
import tempfile
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
PCH_HEADER = "torch/extension.h"
# torch 2.13's torch/extension.h precompiles to about 0.8 GB with g++ 12: below this file size
# limit (RLIMIT_FSIZE) the write would fail after a minute of work, so no build is tried.
PCH_MIN_FILE_LIMIT = 2 << 30
# Each flag set needs its own header (about 0.8 GB): past this many in the cache, a new flag set
# builds without one rather than fill the disk (most candidates pass no flags, or -O3).
PCH_MAX_HEADERS = 4


class BuildError(RuntimeError):
    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


@dataclass
class BuildEvent:
    kind: str  # lean-cpp | lean-nvcc | load_inline | compile-only-nvcc
    name: str
    ok: bool
    seconds: float
    cached: bool
    log: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    pch: str = ""  # the precompiled header the C++ compile read, or why none
    error: str = ""  # what failed, when the build failed (the log holds the compiler's words)


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
    """Compile an `extern "C"` C++ source into a shared library (cached) and load it. In a worker whose
    judge builds (`set_judge_builder`), the judge builds it and this loads the judge's artifact."""
    flags = [*DEFAULT_CXX_FLAGS, *(["-fopenmp"] if openmp else []), *extra_cflags]
    _check_flags(flags)
    if _JUDGE_BUILDER is not None:
        from agentforge.evaluator.protocol.messages import Build

        path = _built_by_judge(Build("lean-cpp", name, [source], extra_cflags=[str(f) for f in extra_cflags],
                                     openmp=bool(openmp)), {"cpp": source}, tuple(flags))
        return ctypes.CDLL(path)
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
    """Compile a CUDA source (no torch headers) to a cubin, cached, and load it with CuPy.

    The module's kernels (`get_function`) take Python numbers as the C types their `extern "C"`
    signature declares (CuPy alone would pass a Python int as 64 bits, misreading every `int`
    parameter and the ones after it)."""
    started = time.perf_counter()
    arch = arch_override or device_arch()
    ok, log, cubin = cuda_cubin(name, source, arch, extra_cuda_cflags)
    BUILD_EVENTS.append(BuildEvent("lean-nvcc", name, ok, time.perf_counter() - started, False, log,
                                   {"cuda": source, "cubin": str(cubin)}, (arch,)))
    if not ok:
        raise BuildError(f"nvcc failed to compile {name} for {arch}", log)
    import cupy

    return TypedModule(cupy.RawModule(path=str(cubin)), kernel_signatures(source))


def cuda_cubin(name: str, source: str, arch: str, extra_cuda_cflags: Sequence[str] = ()) -> tuple[bool, str, Path]:
    """(ok, log, cubin) of the lean build. The cache key is the source and flags, not the name, so
    a source built first under another name is found as the one cubin in its cache folder."""
    from agentforge.evaluator.worker.compile_only import compile_cuda_source

    ok, log, cubin = compile_cuda_source(source, name, arch, list(extra_cuda_cflags), torch_headers=False)
    if ok and not cubin.is_file():
        found = sorted(cubin.parent.glob("*.cubin"))
        if found:
            cubin = found[0]
    return ok, log, cubin


# C parameter types a Python number is converted to (the rest: pointers, vectors, left to CuPy).
_SCALAR_TYPES = {
    "int": "int32", "signed": "int32", "signed int": "int32", "int32_t": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32",
    "long long": "int64", "long long int": "int64", "long": "int64", "long int": "int64", "int64_t": "int64",
    "ssize_t": "int64", "ptrdiff_t": "int64", "unsigned long long": "uint64", "unsigned long": "uint64",
    "uint64_t": "uint64", "size_t": "uint64", "float": "float32", "double": "float64",
    "short": "int16", "unsigned short": "uint16", "bool": "bool",
}
_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
_KERNEL = re.compile(r"__global__\s+" + _BOUNDS + r"void\s+" + _BOUNDS + r"(\w+)\s*\(([^)]*)\)")


def kernel_signatures(source: str) -> dict[str, tuple[str | None, ...]]:
    """Per `__global__` function of `source`: the numpy dtype name of each scalar parameter (None for
    pointers and types not in `_SCALAR_TYPES`)."""
    found: dict[str, tuple[str | None, ...]] = {}
    for name, params in _KERNEL.findall(source):
        types: list[str | None] = []
        for param in filter(None, (p.strip() for p in params.split(","))):
            if "*" in param or "&" in param or "[" in param:
                types.append(None)
                continue
            words = [w for w in param.split() if w not in ("const", "volatile", "__restrict__", "__grid_constant__")]
            types.append(_SCALAR_TYPES.get(" ".join(words[:-1])) if len(words) > 1 else None)
        found[name] = tuple(types)
    return found


def typed_args(args: Sequence[Any], types: Sequence[str | None]) -> tuple[Any, ...]:
    """`args` with each Python int, float or bool turned into the numpy scalar its parameter
    declares; numpy scalars, arrays and pointers pass unchanged."""
    import numpy

    out = []
    for i, arg in enumerate(args):
        kind = types[i] if i < len(types) else None
        out.append(numpy.dtype(kind).type(arg) if kind is not None and type(arg) in (int, float, bool) else arg)
    return tuple(out)


class TypedModule:
    """A CuPy RawModule whose kernels convert Python numbers to their declared C types."""

    def __init__(self, module: Any, signatures: dict[str, tuple[str | None, ...]]):
        self._module, self._signatures = module, signatures

    def get_function(self, name: str) -> Any:
        kernel = self._module.get_function(name)
        types = self._signatures.get(name, ())

        def launch(grid: Any, block: Any, args: Sequence[Any], *rest: Any, **options: Any) -> Any:
            return kernel(grid, block, typed_args(args, types), *rest, **options)

        launch.kernel = kernel  # type: ignore[attr-defined]
        return launch

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._module, attribute)


@dataclass(frozen=True)
class TorchBuildPlan:
    """What torch's JIT build would run for one extension: the variables and object targets of
    the ninja file torch itself writes (`cxx`, `cflags`, `post_cflags`, `nvcc`, `cuda_cflags`,
    `cuda_post_cflags`, `ldflags`)."""

    ninja_file: Path
    variables: dict[str, str]
    objects: dict[str, str]  # object file -> rule (compile | cuda_compile)

    def words(self, variable: str) -> list[str]:
        return shlex.split(self.variables.get(variable, ""))


def torch_build_plan(folder: Path, name: str, sources: Sequence[Path], *, extra_cflags: Sequence[str] = (),
                     extra_cuda_cflags: Sequence[str] = (), extra_ldflags: Sequence[str] = (),
                     extra_include_paths: Sequence[str] = (), with_cuda: bool = False,
                     cuda_home: str | None = None) -> TorchBuildPlan:
    """Have torch write the ninja file of its own JIT build into `folder`, and read it back.

    torch's flags (`-std=c++20`, `-fPIC`, `-DTORCH_API_INCLUDE_EXTENSION_H`, its include paths,
    and for nvcc `COMMON_NVCC_FLAGS` such as `-D__CUDA_NO_HALF_OPERATORS__`) then come from the
    installed torch, never from a copy here. A CPU-only torch knows no CUDA toolkit
    (`CUDA_HOME` is None), and a CUDA torch may know one without headers (`torch_cuda_home`):
    `cuda_home` stands in for it while the file is written. Include the
    arch in `extra_cuda_cflags`, or torch asks the local GPU for one."""
    from torch.utils import cpp_extension

    write = cpp_extension._write_ninja_file_to_build_library
    arguments = dict(path=str(folder / "build.ninja"), name=name, sources=[str(s) for s in sources],
                     extra_cflags=list(extra_cflags), extra_cuda_cflags=list(extra_cuda_cflags),
                     extra_sycl_cflags=[], extra_ldflags=list(extra_ldflags),
                     extra_include_paths=list(extra_include_paths), with_cuda=with_cuda, with_sycl=False,
                     is_standalone=False)
    accepted = inspect.signature(write).parameters
    saved = cpp_extension.CUDA_HOME
    if with_cuda and cuda_home and not has_cuda_headers(saved):  # none, or one without headers
        cpp_extension.CUDA_HOME = cuda_home
    try:
        write(**{k: v for k, v in arguments.items() if k in accepted})
    finally:
        cpp_extension.CUDA_HOME = saved
    return _read_ninja_file(folder / "build.ninja")


def _read_ninja_file(path: Path) -> TorchBuildPlan:
    variables: dict[str, str] = {}
    objects: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if match := re.match(r"^(\w+) = (.*)$", line):
            variables[match[1]] = match[2]
        elif (match := re.match(r"^build (\S+): (\w+) ", line)) and match[2] in ("compile", "cuda_compile"):
            objects[match[1]] = match[2]
    return TorchBuildPlan(path, variables, objects)


class _SourcesWritten(Exception):
    pass


def torch_inline_sources(folder: Path, name: str, cpp_sources: Sequence[str], cuda_sources: Sequence[str],
                         functions: Any, **options: Any) -> list[Path]:
    """The files torch's `load_inline` builds for these arguments, written by torch itself into
    `folder`: main.cpp (`#include <torch/extension.h>`, the sources, the pybind module it
    generates for `functions`) and cuda.cu (with its implicit headers). Its build step is
    intercepted, so nothing is compiled here."""
    from torch.utils import cpp_extension

    written: list[str] = []

    def intercept(_name: str, sources: list[str], *_: Any, **__: Any) -> Any:
        written.extend(sources)
        raise _SourcesWritten

    accepted = inspect.signature(_torch_load_inline()).parameters
    saved = cpp_extension._jit_compile
    cpp_extension._jit_compile = intercept
    try:
        _torch_load_inline()(name, cpp_sources=list(cpp_sources), cuda_sources=list(cuda_sources) or None,
                             functions=functions, build_directory=str(folder), use_pch=False,
                             **{k: v for k, v in options.items() if k in accepted})
    except _SourcesWritten:
        pass
    finally:
        cpp_extension._jit_compile = saved
    if not written:
        raise BuildError(f"torch's load_inline wrote no sources for {name}", log="")
    return [Path(p) for p in written]


def extension_pch(plan: TorchBuildPlan, build: bool = True, trusted_only: bool = False) -> tuple[Path | None, str]:
    """A precompiled `torch/extension.h` for the C++ compile of `plan`, from the build cache.

    Returns the folder to put first on the include path (g++ then finds
    `torch/extension.h.gch` there before the header itself) and a note for the build record;
    (None, why) to compile without one. The header is precompiled with the compiler and flags
    torch would compile main.cpp with, less `-DTORCH_EXTENSION_NAME` (no torch header reads
    it), so g++ accepts it; where it would not, g++ falls back to the header and only speed is
    lost. One is built on a miss when `build` and the process may write a file that large (about
    40 s and 2 GB of memory on two cores, once per compiler and flag set).

    Why not torch's own `use_pch=True`: torch writes `torch/extension.h.gch` into its install
    tree (read-only to the sandbox, one slot for every flag set, written in place while other
    builds may read it), and every call with the default `use_pch=False` deletes it."""
    import torch

    cxx = plan.words("cxx")
    flags = [f for f in plan.words("cflags") if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    flags += plan.words("post_cflags")
    key = build_cache.build_key("pch", [PCH_HEADER, torch.__version__, str(Path(torch.__file__).parent)], flags,
                                f"{shutil.which(cxx[0]) or cxx[0]} {_compiler_id(cxx[0])}")
    trusted = build_cache.trusted_entry("pch", key)
    if trusted.ready:
        return trusted.folder, f"{trusted.folder / PCH_HEADER}.gch (prebuilt by the parent)"
    if trusted_only:  # a judge's build reads no header a candidate's worker could have written
        return None, "no precompiled header prebuilt by the parent for these flags yet"
    target = build_cache.entry("pch", key)
    if target.ready:
        return target.folder, f"{target.folder / PCH_HEADER}.gch"
    if not build:
        return None, "no precompiled header for these flags yet"
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and limit < PCH_MIN_FILE_LIMIT:
        return None, f"no precompiled header: the file size limit ({limit >> 20} MiB) is below its size"
    if len(build_cache.ready_entries("pch")) >= PCH_MAX_HEADERS:
        return None, f"no precompiled header: the cache holds {PCH_MAX_HEADERS} for other flags already"
    with build_cache.locked("pch", key):
        if target.ready:  # built by another process while this one waited
            return target.folder, f"{target.folder / PCH_HEADER}.gch"
        return _build_pch(cxx, flags, target)


def _build_pch(cxx: list[str], flags: list[str], target: build_cache.CacheEntry) -> tuple[Path | None, str]:
    started = time.perf_counter()
    staging = build_cache.staging_dir("pch")
    (staging / PCH_HEADER).parent.mkdir(parents=True)
    # Precompiled through a wrapper, so torch's headers are read from their -isystem path as in
    # the real compile. The folder also needs a header of that name: g++ opens it for a second
    # `#include <torch/extension.h>` (main.cpp has torch's, most sources their own) or when it
    # refuses the .gch; it passes on to torch's, which `#pragma once` then skips if already read.
    (staging / "pch.h").write_text(f"#include <{PCH_HEADER}>\n")
    (staging / PCH_HEADER).write_text(f"#include_next <{PCH_HEADER}>\n")
    command = [*cxx, "-x", "c++-header", *flags, "pch.h", "-o", f"{PCH_HEADER}.gch"]
    try:
        proc = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        return None, f"no precompiled header: {exc}"
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        return None, f"no precompiled header: {shlex.join(command)} failed\n{(proc.stdout + proc.stderr)[-2000:]}"
    (staging / "pch.h").unlink()
    build_cache.publish(staging, target)
    return target.folder, f"{target.folder / PCH_HEADER}.gch (built in {time.perf_counter() - started:.1f} s)"


def prepare_extension_pch(extra_cflags: Sequence[str] = (), extra_include_paths: Sequence[str] = (),
                          with_cuda: bool = False) -> tuple[Path | None, str]:
    """Build the precompiled `torch/extension.h` for `load_inline` calls with these flags ahead of
    time (a warm parent, a benchmark); what `extension_pch` returns."""
    with tempfile.TemporaryDirectory(prefix="agentforge-plan-") as tmp:
        plan = _inline_plan(Path(tmp), "pch_probe", with_cuda, extra_cflags, extra_include_paths)
        return extension_pch(plan)


def _inline_plan(folder: Path, name: str, with_cuda: bool, extra_cflags: Sequence[str],
                 extra_include_paths: Sequence[str]) -> TorchBuildPlan:
    sources = [folder / "main.cpp", *([folder / "cuda.cu"] if with_cuda else [])]
    # The arch only keeps torch from asking a GPU for one: the C++ flags do not depend on it.
    return torch_build_plan(folder, name, sources, extra_cflags=extra_cflags, with_cuda=with_cuda,
                            extra_cuda_cflags=["-gencode=arch=compute_90a,code=sm_90a"] if with_cuda else [],
                            extra_include_paths=extra_include_paths,
                            cuda_home=local_cuda_home() if with_cuda else None)


def has_cuda_headers(home: str | None) -> bool:
    return bool(home) and (Path(str(home)) / "include" / "cuda_runtime_api.h").is_file()


@contextlib.contextmanager
def torch_cuda_home(with_cuda: bool) -> Iterator[str | None]:
    """torch's `CUDA_HOME` for one CUDA build, corrected when it holds no CUDA headers.

    torch takes the toolkit root from `CUDA_HOME`, else from the folder above `which nvcc`: where
    nvcc on the path is a wrapper script (`/usr/local/bin/nvcc` that execs the real one), that is
    `/usr/local`, and every `load_inline` with CUDA fails on `cuda_runtime_api.h: No such file`.
    The root nvcc itself reports (`compile_only.cuda_home`) stands in for the build."""
    from torch.utils import cpp_extension

    saved = cpp_extension.CUDA_HOME
    chosen = saved
    if with_cuda and not has_cuda_headers(saved):
        local = local_cuda_home()
        if has_cuda_headers(local):
            chosen = local
    cpp_extension.CUDA_HOME = chosen
    try:
        yield chosen
    finally:
        cpp_extension.CUDA_HOME = saved


def local_cuda_home() -> str | None:
    """The toolkit root nvcc reports: for a CPU-only torch that knows none (a compile-only CUDA
    build's plan), and for a CUDA torch whose guess holds no headers."""
    from agentforge.evaluator.worker import compile_only

    nvcc = compile_only.find_nvcc()
    return compile_only.cuda_home(nvcc) if nvcc else None


def cached_load_inline(name: str, cpp_sources: Any = (), cuda_sources: Any = (), functions: Any = None,
                       extra_cflags: Any = None, extra_cuda_cflags: Any = None, extra_ldflags: Any = None,
                       extra_include_paths: Any = None, build_directory: Any = None, verbose: bool = False,
                       with_cuda: Any = None, is_python_module: bool = True, with_pytorch_error_handling: bool = True,
                       keep_intermediates: bool = True, use_pch: bool = False, **kwargs: Any) -> Any:
    """torch's `load_inline` with a content-addressed build directory, a recorded log and the
    build cache's precompiled header (the candidate's `use_pch` and `build_directory` are not
    passed on: see `extension_pch`)."""
    cpp = _as_list(cpp_sources)
    cuda = _as_list(cuda_sources)
    # As it travels to the judge (a tuple arrives as a list): the module's name is keyed on its repr.
    functions = list(functions) if isinstance(functions, tuple) else functions
    flags = [*(extra_cflags or []), "|", *(extra_cuda_cflags or []), "|", *(extra_ldflags or [])]
    try:
        _check_flags(flags)
    except BuildError as exc:  # recorded: a refused build fails the verdict even when the candidate catches it
        BUILD_EVENTS.append(BuildEvent("load_inline", name, False, 0.0, False, exc.log, error=str(exc),
                                       sources={"cpp": "\n".join(cpp), "cuda": "\n".join(cuda)}, flags=tuple(flags)))
        raise
    options = inline_options(with_pytorch_error_handling=with_pytorch_error_handling, **kwargs)
    key = inline_key(cpp, cuda, functions, flags, options)
    # A module name unique to the content: two candidates named "relu_ext" never collide.
    unique_name = f"{name}_{key[:12]}"
    if _JUDGE_BUILDER is not None:
        from agentforge.evaluator.protocol.messages import Build

        path = _built_by_judge(Build("load_inline", name, cpp, cuda_sources=cuda, functions=functions,
                                     extra_cflags=_strings(extra_cflags), extra_cuda_cflags=_strings(extra_cuda_cflags),
                                     extra_ldflags=_strings(extra_ldflags),
                                     extra_include_paths=_strings(extra_include_paths),
                                     with_cuda=None if with_cuda is None else bool(with_cuda),
                                     is_python_module=bool(is_python_module), **options),
                               {"cpp": "\n".join(cpp), "cuda": "\n".join(cuda)}, tuple(flags))
        return _import_built(unique_name, path, bool(is_python_module))
    target = build_cache.entry("load_inline", key)
    target.folder.mkdir(parents=True, exist_ok=True)
    was_cached = target.ready
    started = time.perf_counter()
    event = BuildEvent("load_inline", name, False, 0.0, was_cached, sources={"cpp": "\n".join(cpp),
                       "cuda": "\n".join(cuda)}, flags=tuple(flags))
    BUILD_EVENTS.append(event)
    includes = list(extra_include_paths or [])
    pch_folder, event.pch = _pch_for_build(target, unique_name, bool(cuda) or bool(with_cuda), extra_cflags or [],
                                           includes, _reads_extension_header(cpp, options))
    captured = None
    try:
        with (build_cache.locked("load_inline", key), _captured_build_output() as captured,
              torch_cuda_home(bool(cuda) or bool(with_cuda))):
            _clear_stale_baton(target.folder)
            module = _torch_load_inline()(
                unique_name, cpp_sources=cpp, cuda_sources=cuda or None, functions=functions,
                extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                extra_include_paths=[*([str(pch_folder)] if pch_folder else []), *includes],
                build_directory=str(target.folder), verbose=True, with_cuda=with_cuda,
                is_python_module=is_python_module, with_pytorch_error_handling=with_pytorch_error_handling,
                keep_intermediates=keep_intermediates, use_pch=False, **kwargs,
            )
    except Exception as exc:
        event.seconds = time.perf_counter() - started
        event.log = (captured.text() if captured else "") + f"\n{type(exc).__name__}: {exc}"
        event.error = f"load_inline failed to build {name}"
        raise BuildError(f"load_inline failed to build {name}", event.log) from exc
    event.ok, event.seconds = True, time.perf_counter() - started
    event.log = f"precompiled header: {event.pch or 'none'}\n{captured.text()}"
    (target.folder / "READY").write_text("ok\n")
    return module


# `load_inline`'s options that change what is compiled, with torch's defaults: a build keys on and
# carries to the judge those that differ (so the keys of builds that set none stay as they were).
INLINE_OPTION_DEFAULTS: dict[str, bool] = {"with_pytorch_error_handling": True, "no_implicit_headers": False}


def inline_options(**given: Any) -> dict[str, bool]:
    """The options among `given` that differ from torch's defaults, as booleans."""
    return {name: bool(given[name]) for name, default in INLINE_OPTION_DEFAULTS.items()
            if name in given and bool(given[name]) != default}


def _reads_extension_header(cpp: Sequence[str], options: dict[str, bool]) -> bool:
    """Whether main.cpp reads torch/extension.h: always, but with no implicit headers, where a
    source includes it (a precompiled header built for one that does not would cost a minute)."""
    return not options.get("no_implicit_headers") or any(PCH_HEADER in source for source in cpp)


def inline_key(cpp: Sequence[str], cuda: Sequence[str], functions: Any, flags: Sequence[str],
               options: dict[str, bool] | None = None) -> str:
    """The build cache's key of one `load_inline` call (also the suffix of its module's name)."""
    import torch

    parts = [*cpp, "\0cuda\0", *cuda, repr(functions), *([repr(sorted(options.items()))] if options else [])]
    return build_cache.build_key("load_inline", parts, flags, f"torch-{torch.__version__}")


def _strings(values: Any) -> list[str]:
    return [str(v) for v in (values or [])]


# ----- builds by the judge ----------------------------------------------------------------------
# In a worker whose judge builds (`messages.Setup.judge_builds`), `load_cpp` and `load_inline` send
# the judge a `Build` and load the artifact it hands back: a file the judge wrote and hashed, built by
# the control worker (which never runs candidate code), so that the judge's sampler counts as the
# candidate's own code only what the judge built (`judge.judge_builds`).

_JUDGE_BUILDER: Any = None  # Callable[[Build], dict]: the worker's channel to its judge


def set_judge_builder(builder: Any) -> None:
    """Set by the worker's process at setup (`sandbox.worker`); None builds here, as before."""
    global _JUDGE_BUILDER
    _JUDGE_BUILDER = builder


def _built_by_judge(build: Any, sources: dict[str, str], flags: tuple[str, ...]) -> str:
    """The path of the judge's artifact for `build`, recorded in `BUILD_EVENTS` as a build here is."""
    started = time.perf_counter()
    reply = _JUDGE_BUILDER(build)
    ok = reply.get("ok") is True and isinstance(reply.get("path"), str)
    event = BuildEvent(build.kind, build.name, ok, float(reply.get("seconds") or time.perf_counter() - started),
                       reply.get("cached") is True, str(reply.get("log", ""))[-20000:], sources, flags,
                       pch=str(reply.get("pch", "")), error=str(reply.get("error", "")))
    BUILD_EVENTS.append(event)
    if not ok:
        raise BuildError(event.error or f"the judge's build of {build.name} failed", event.log)
    return str(reply["path"])


def _import_built(module_name: str, path: str, is_python_module: bool) -> Any:
    """What torch's `load_inline` returns for a finished build at `path`: the extension module, or
    (not a Python module) the library loaded into torch.ops and its path."""
    if not is_python_module:
        import torch

        torch.ops.load_library(path)
        return path
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    if spec is None:
        raise BuildError(f"the judge's build of {module_name} cannot be imported", log=path)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build_artifact(build: Any) -> dict[str, Any]:
    """Build `build` (a `messages.Build`) here, in a fresh private folder, and return the artifact's
    bytes (a uint8 tensor), or why it failed: the control worker's side of a judge's build. Nothing
    built is loaded or imported here, and nothing is read from the candidate's build cache (its
    precompiled header included): only the parent's trusted tree."""
    import torch

    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="agentforge-judge-build-"))
    try:
        if build.kind == "lean-cpp":
            flags = [*DEFAULT_CXX_FLAGS, *(["-fopenmp"] if build.openmp else []), *build.extra_cflags]
            _check_flags(flags)
            if len(build.sources) != 1:
                raise BuildError("a lean C++ build takes exactly one source", log="")
            (folder / "kernel.cpp").write_text(build.sources[0])
            command = ["g++", *flags, "kernel.cpp", "-o", "kernel.so"]
            proc = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
            log, pch, library = f"$ {' '.join(command)}\n{proc.stdout}{proc.stderr}", "", folder / "kernel.so"
            if proc.returncode != 0:
                raise BuildError(f"g++ failed to build {build.name} (exit {proc.returncode})", log)
        elif build.kind == "load_inline":
            library, log, pch = _inline_artifact(build, folder)
        else:
            raise BuildError(f"no such build kind {build.kind!r}", log="")
        data = library.read_bytes()
        return {"ok": True, "artifact": torch.frombuffer(bytearray(data), dtype=torch.uint8), "log": log[-20000:],
                "pch": pch, "seconds": time.perf_counter() - started}
    except BuildError as exc:
        return {"ok": False, "error": str(exc), "log": exc.log[-20000:], "seconds": time.perf_counter() - started}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000], "log": "",
                "seconds": time.perf_counter() - started}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _inline_artifact(build: Any, folder: Path) -> tuple[Path, str, str]:
    """torch's own `load_inline` build of `build` in `folder`, stopped before the import: (library,
    log, the precompiled header it read)."""
    from torch.utils import cpp_extension

    flags = [*build.extra_cflags, "|", *build.extra_cuda_cflags, "|", *build.extra_ldflags]
    _check_flags(flags)
    cuda = list(build.cuda_sources)
    with_cuda = bool(cuda) or bool(build.with_cuda)
    options = inline_options(with_pytorch_error_handling=build.with_pytorch_error_handling,
                             no_implicit_headers=build.no_implicit_headers)
    unique_name = f"{build.name}_{inline_key(build.sources, cuda, build.functions, flags, options)[:12]}"
    if not _reads_extension_header(build.sources, options):
        pch_folder, pch = None, f"none: main.cpp does not include {PCH_HEADER}"
    else:
        try:
            with tempfile.TemporaryDirectory(prefix="agentforge-plan-") as tmp:
                pch_folder, pch = extension_pch(_inline_plan(Path(tmp), unique_name, with_cuda, build.extra_cflags,
                                                             build.extra_include_paths), build=False,
                                                trusted_only=True)
        except Exception as exc:
            pch_folder, pch = None, f"no precompiled header: {type(exc).__name__}: {exc}"
    built: list[str] = []

    def stop_before_import(module_name: str, path: str, is_python_module: bool) -> Any:
        built.append(str(Path(path) / f"{module_name}.so"))
        return None

    saved = cpp_extension._import_module_from_library
    cpp_extension._import_module_from_library = stop_before_import
    captured = None
    try:
        with _captured_build_output() as captured, torch_cuda_home(with_cuda):
            _torch_load_inline()(
                unique_name, cpp_sources=list(build.sources), cuda_sources=cuda or None, functions=build.functions,
                extra_cflags=build.extra_cflags, extra_cuda_cflags=build.extra_cuda_cflags,
                extra_ldflags=build.extra_ldflags,
                extra_include_paths=[*([str(pch_folder)] if pch_folder else []), *build.extra_include_paths],
                build_directory=str(folder), verbose=True, with_cuda=build.with_cuda,
                is_python_module=build.is_python_module, use_pch=False,
                with_pytorch_error_handling=build.with_pytorch_error_handling,
                no_implicit_headers=build.no_implicit_headers)
    except Exception as exc:
        log = (captured.text() if captured else "") + f"\n{type(exc).__name__}: {exc}"
        raise BuildError(f"load_inline failed to build {build.name}", log) from exc
    finally:
        cpp_extension._import_module_from_library = saved
    if not built or not Path(built[0]).is_file():
        raise BuildError(f"load_inline built no library for {build.name}", captured.text() if captured else "")
    return Path(built[0]), f"precompiled header: {pch or 'none'}\n{captured.text()}", pch


def _clear_stale_baton(folder: Path) -> None:
    """Remove torch's build `lock` from a build folder whose key lock this process holds: no build
    of this key runs elsewhere, so the file is a killed build's (a sandbox stopped at its time
    limit), and torch would wait on it forever, every later build or load of the same source with
    it."""
    with contextlib.suppress(FileNotFoundError):
        (folder / "lock").unlink()


def _pch_for_build(target: build_cache.CacheEntry, name: str, with_cuda: bool, extra_cflags: Sequence[str],
                   extra_include_paths: Sequence[str], reads_header: bool = True) -> tuple[Path | None, str]:
    """The precompiled header folder for a build, chosen once: a finished build keeps the include
    path it was built with, or ninja would see a new command and compile it again. None where
    main.cpp does not read the header (`reads_header`): building one would cost a minute for nothing."""
    chosen = target.folder / "pch-folder"
    if target.ready:
        recorded = chosen.read_text() if chosen.exists() else ""
        return (Path(recorded), recorded) if recorded else (None, "")
    if not reads_header:
        chosen.write_text("")
        return None, f"none: main.cpp does not include {PCH_HEADER}"
    try:
        with tempfile.TemporaryDirectory(prefix="agentforge-plan-") as tmp:
            folder, note = extension_pch(_inline_plan(Path(tmp), name, with_cuda, extra_cflags,
                                                      extra_include_paths))
    except Exception as exc:  # a faster build is never worth a failed one
        folder, note = None, f"no precompiled header: {type(exc).__name__}: {exc}"
    chosen.write_text(str(folder) if folder else "")
    return folder, note


def _torch_load_inline() -> Any:
    """torch's own `load_inline`, never a stand-in installed over it (which may call this)."""
    from torch.utils import cpp_extension

    global _TORCH_LOAD_INLINE
    current = cpp_extension.load_inline
    if _TORCH_LOAD_INLINE is None and getattr(current, "__module__", "") == cpp_extension.__name__:
        _TORCH_LOAD_INLINE = current
    if _TORCH_LOAD_INLINE is None:
        raise RuntimeError("torch's load_inline is not known: a stand-in was installed before it was saved")
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
