"""A build verdict for CUDA candidates on a machine without a GPU.

While the candidate module executes, `load_inline` is replaced by `capture_load_inline`, which
compiles each CUDA source with nvcc for the job's architecture (default sm_90a), with
`-Xptxas -v` for the resource report, and then stops the module: nothing can run without a GPU.
The host-side C++ bindings are not built (they need no verdict of their own).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentforge.evaluator import build_cache
from agentforge.evaluator.native import BUILD_EVENTS, BuildError, BuildEvent, _as_list, _check_flags

NVCC_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xptxas", "-v", "-lineinfo")


class CompileOnlyStop(Exception):
    """Raised after the CUDA sources compiled: the module cannot go further without a GPU."""


def find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _torch_includes() -> list[str]:
    """What `torch/extension.h` needs: torch's include folders and Python's headers."""
    import sysconfig

    from torch.utils import cpp_extension

    return [f"-I{p}" for p in [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]]


def _arch_flags(arch: str) -> list[str]:
    number = arch.removeprefix("sm_")
    return [f"-gencode=arch=compute_{number},code=sm_{number}"]


def compile_cuda_source(source: str, name: str, arch: str, extra_flags: list[str], torch_headers: bool = True,
                        ) -> tuple[bool, str, Path]:
    """nvcc -cubin of one translation unit (cached). Returns (ok, log, cubin path).

    `torch_headers=False` is the lean path: a kernel source that needs no `torch/extension.h`
    compiles in about a second instead of tens of seconds."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError("nvcc is not installed: no compile-only verdict possible", log="")
    flags = [*NVCC_FLAGS, *_arch_flags(arch), *extra_flags]
    _check_flags(flags)
    includes = _torch_includes() if torch_headers else []
    key = build_cache.build_key("nvcc-cubin", [source, *includes], flags, nvcc)
    target = build_cache.entry("nvcc-cubin", key)
    if target.ready:
        return True, (target.folder / "build.log").read_text(), target.folder / f"{name}.cubin"
    staging = build_cache.staging_dir("nvcc-cubin")
    (staging / f"{name}.cu").write_text(source)
    command = [nvcc, "-cubin", *flags, *includes, f"{name}.cu", "-o", f"{name}.cubin"]
    proc = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=900)
    log = f"$ {' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(command))}\n"
    log += proc.stdout + proc.stderr
    (staging / "build.log").write_text(log)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        return False, log, Path()
    build_cache.publish(staging, target)
    return True, log, target.folder / f"{name}.cubin"


def make_capture(arch: str):
    """A `load_inline` stand-in that compiles the CUDA sources only."""

    def capture_load_inline(name: str, cpp_sources: Any = (), cuda_sources: Any = (), functions: Any = None,
                            extra_cuda_cflags: Any = None, **_: Any) -> Any:
        cuda = _as_list(cuda_sources)
        if not cuda:
            raise BuildError("compile-only CUDA verdict: the candidate passes no cuda_sources to load_inline",
                             log="")
        started = time.perf_counter()
        ok, log, cubin = compile_cuda_source("\n".join(cuda), name, arch, list(extra_cuda_cflags or []))
        event = BuildEvent("compile-only-nvcc", name, ok, time.perf_counter() - started, False, log,
                           {"cuda": "\n".join(cuda), "cubin": str(cubin)}, (arch,))
        BUILD_EVENTS.append(event)
        if not ok:
            raise BuildError(f"nvcc failed to compile {name} for {arch}", log)
        raise CompileOnlyStop(name)

    return capture_load_inline


def make_lean_capture(arch: str):
    """A `native.load_cuda` stand-in for machines without a GPU: compile, then stop."""

    def capture_load_cuda(name: str, source: str, arch_override: str | None = None,
                          extra_cuda_cflags: Any = (), **_: Any) -> Any:
        started = time.perf_counter()
        ok, log, cubin = compile_cuda_source(source, name, arch_override or arch, list(extra_cuda_cflags),
                                             torch_headers=False)
        BUILD_EVENTS.append(BuildEvent("compile-only-nvcc", name, ok, time.perf_counter() - started, False, log,
                                       {"cuda": source, "cubin": str(cubin)}, (arch,)))
        if not ok:
            raise BuildError(f"nvcc failed to compile {name} for {arch}", log)
        raise CompileOnlyStop(name)

    return capture_load_cuda


@contextlib.contextmanager
def capture_redirected(arch: str) -> Iterator[None]:
    from agentforge.evaluator import native
    from torch.utils import cpp_extension

    originals = cpp_extension.load_inline, native.load_cuda
    cpp_extension.load_inline = make_capture(arch)
    native.load_cuda = make_lean_capture(arch)
    try:
        yield
    finally:
        cpp_extension.load_inline, native.load_cuda = originals
