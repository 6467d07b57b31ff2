"""Build a `load_inline` call's CUDA sources as a CPU extension that executes them (emulation).

The CUDA sources and the host wrappers (`cpp_sources`) are rewritten (`rewrite.rewrite`) and
compiled by the host compiler as one translation unit, through torch's own `load_inline` for the
CPU (`native.cached_load_inline`: a content-addressed build folder in the build cache, its
precompiled torch header), with the emulation's headers first on the include path: they stand in
for `cuda_runtime.h`, `cuda_fp16.h`, `cuda_bf16.h`, `cooperative_groups.h`, `c10/cuda/*` and
`ATen/cuda/*`. The nvcc flags of the call (`extra_cuda_cflags`) do not apply to the host compiler:
the emulation builds with its own, and the compile-only verdict judges the nvcc ones.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from agentforge.evaluator.cuda_emulation.rewrite import NeedsGpu, RewriteError, needs_fibers, rewrite

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
EMULATION_CFLAGS = ["-O2", "-w", "-fno-strict-aliasing", "-DAGENTFORGE_CUDA_EMULATION=1"]
LEAN_ONLY = {"agentforge_emu/lean.h"}  # read by the lean path's builds only (`lean`), not by these


def _runtime_version(lean: bool = False) -> str:
    """A hash of the emulation's headers: part of every build's sources, so that a changed runtime
    is never served from a build of the old one (the build cache keys on sources and flags only).
    `lean`: with the headers only the lean path's builds read."""
    digest = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*.h*")):
        if not lean and path.relative_to(INCLUDE_DIR).as_posix() in LEAN_ONLY:
            continue
        digest.update(path.relative_to(INCLUDE_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


PRELUDE = (f"// agentforge CUDA emulation runtime {_runtime_version()}\n"
           '#include "agentforge_emu/runtime.h"\n#include "agentforge_emu/torch_cuda.h"\n')

__all__ = ["INCLUDE_DIR", "NeedsGpu", "RewriteError", "emulated_sources", "load_inline_emulated"]


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else [str(s) for s in sources]


def emulated_sources(cpp_sources: Any, cuda_sources: Any) -> list[str]:
    """The `cpp_sources` of the CPU build: prelude, rewritten CUDA sources, rewritten host code."""
    cuda, cpp = _as_list(cuda_sources), _as_list(cpp_sources)
    plain = not needs_fibers([*cuda, *cpp])  # no barrier or warp collective: threads as plain calls
    return [PRELUDE, *(rewrite(s, plain) for s in cuda), *(rewrite(s, plain) for s in cpp)]


_CPU_BUILD: list[Any] = []


def save_cpu_build(fn: Any) -> None:
    """The CPU build to go through, saved before the emulation swaps `native.cached_load_inline`."""
    if not _CPU_BUILD:
        _CPU_BUILD.append(fn)


def _cpu_build() -> Any:
    from agentforge.evaluator import native

    return _CPU_BUILD[0] if _CPU_BUILD else native.cached_load_inline


def load_inline_emulated(name: str, cpp_sources: Any = (), cuda_sources: Any = None, functions: Any = None,
                         extra_cflags: Any = None, extra_include_paths: Any = None, **_: Any) -> Any:
    """The extension `load_inline` would build on a GPU machine, built to run on the CPU."""
    cflags = [*EMULATION_CFLAGS, *[f for f in (extra_cflags or []) if f.startswith(("-D", "-U", "-I"))]]
    return _cpu_build()(
        f"{name}_emu", cpp_sources=emulated_sources(cpp_sources, cuda_sources), cuda_sources=None,
        functions=functions, extra_cflags=cflags,
        extra_include_paths=[str(INCLUDE_DIR), *(extra_include_paths or [])], with_cuda=False)
