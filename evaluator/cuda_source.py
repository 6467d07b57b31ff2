"""Whether a CUDA candidate's text could hold any CUDA code at all (standard library only).

Any CUDA build a candidate can make must contain, somewhere in its text, a kernel (`__global__`),
torch's `cuda_sources=`, the lean `load_cuda`, a CuPy raw, elementwise or reduction kernel, a Numba
`cuda.jit`, NVRTC or the driver's module loader, or a `.cu` file. A `--backend cuda` candidate with
none of them (a C++ or PyTorch answer) is told so from its text, in seconds, instead of after a
build that takes minutes and ends in `no_cuda_build`. Comments count: the check only ever errs
towards building.
"""

from __future__ import annotations

import re

_CUDA_MARKERS = re.compile(
    r"__global__|cuda_sources|load_cuda|RawKernel|RawModule|ElementwiseKernel|ReductionKernel"
    r"|cuda\.jit|nvrtc|cuModule|\.cu\b")


def missing_cuda_source(source: str) -> str | None:
    """Why a `--backend cuda` candidate cannot build any CUDA code, read from its text alone; None
    when its text could hold CUDA."""
    if _CUDA_MARKERS.search(source):
        return None
    return ("the candidate holds no CUDA code (no `__global__` kernel, `cuda_sources`, `load_cuda`, CuPy raw "
            "kernel or .cu file), so --backend cuda has nothing to build; evaluate a C++ or PyTorch answer with "
            "--backend cpu")
