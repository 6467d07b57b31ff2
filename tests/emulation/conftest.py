"""One emulated build per test session: the feature kernels and the planted softmax and cumsum mutants
in one extension (the host compiler takes most of a minute per build on two loaded cores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FUNCTIONS = ["ids", "sum", "warps", "barriers", "atomic_ops", "half_ops", "group_ops", "hang", "shuffle_exit",
             "launch_error", "last_error_after", "reset_device", "sticky_error", "guard_mode"]
SOFTMAX = REPO / "results" / "kernels" / "h100" / "level1" / "softmax" / "kernel.py"
CUMSUM = REPO / "results" / "kernels" / "h100" / "level1" / "cumsum" / "kernel.py"
RELU = REPO / "results" / "kernels" / "h100" / "level1" / "relu" / "kernel.py"
# The shipped relu (no barrier: its threads run as plain calls), its float4 loop reading one vector
# past the input's end.
RELU_PAST = ("if (i < n4) v[u] = __ldcs(x + i);", "if (i <= n4) v[u] = __ldcs(x + i);")
# A removed __syncthreads (a race on the block's scratch, which the thread schedules expose) and a
# loop bound one short (the last column never written: the scalar path of shapes like `odd` only).
BARRIER = ("    if (lane == 0) { scratch_m[warp] = acc.m; scratch_s[warp] = acc.s; }\n    __syncthreads();\n",
           "    if (lane == 0) { scratch_m[warp] = acc.m; scratch_s[warp] = acc.s; }\n")
BOUND = ("for (long j = lane; j < cols; j += lanes) yr[j]", "for (long j = lane; j < cols - 1; j += lanes) yr[j]")
# Out-of-bounds global accesses of the scalar path: a read one past the row's end (past the input's
# end on the last row), a write one past it, a read one before the row's start (before the input's
# start on the first row).
STATS = "for (long j = lane; j < cols; j += lanes) acc = ms_add(acc, __ldg(xr + j));"
READ_PAST = (STATS, STATS.replace("j < cols", "j <= cols"))
WRITE = "for (long j = lane; j < cols; j += lanes) yr[j] ="
WRITE_PAST = (WRITE, WRITE.replace("yr[j]", "yr[j + 1]"))
READ_BEFORE = (STATS, STATS.replace("xr + j)", "xr + j - 1)"))
MUTANTS = ("original", "no_barrier", "short_bound", "read_past_end", "write_past_end", "read_before_start")
# The shipped cumsum, its warp totals in static shared memory (as shipped) or moved to dynamic shared
# memory sized by the launch, each with the warp-0 scan reading one total past the last warp's.
WARP_TOTALS = ("    __shared__ float warp_totals[BLOCK / 32];", "    extern __shared__ float warp_totals[];")
DYN_LAUNCH = ("<<<(unsigned)rows, BLOCK, 0, stream>>>",
              "<<<(unsigned)rows, BLOCK, BLOCK / 32 * sizeof(float), stream>>>")
TOTALS_READ = ("float t = lane < BLOCK / 32 ? warp_totals[lane]", "float t = lane <= BLOCK / 32 ? warp_totals[lane]")
CUMSUM_MUTANTS = ("cumsum_static", "cumsum_static_oob", "cumsum_dyn", "cumsum_dyn_oob")


def kernel_sources(path: Path) -> tuple[str, str]:
    """CUDA_SRC and CPP_SRC of a shipped kernel, as its module computes them."""
    seen: dict[str, Any] = {}
    text = path.read_text().replace("from torch.utils.cpp_extension import load_inline", "")
    exec(compile(text, str(path), "exec"), {"load_inline": lambda **kw: seen.update(kw), "__name__": "k"})
    return seen["cuda_sources"], seen["cpp_sources"]


def _mutate(source: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert source.count(old) == 1, f"the shipped kernel changed: update the mutant {old!r}"
        source = source.replace(old, new)
    return source


def _mutants() -> str:
    cuda, cpp = kernel_sources(SOFTMAX)
    sources = {"original": cuda, "no_barrier": _mutate(cuda, BARRIER), "short_bound": _mutate(cuda, BOUND),
               "read_past_end": _mutate(cuda, READ_PAST), "write_past_end": _mutate(cuda, WRITE_PAST),
               "read_before_start": _mutate(cuda, READ_BEFORE)}
    text = "".join(f"namespace {name} {{\n{src}\n{cpp}\n}}\n" for name, src in sources.items())
    cuda, cpp = kernel_sources(CUMSUM)
    dyn = _mutate(cuda, WARP_TOTALS, DYN_LAUNCH)
    sources = {"cumsum_static": cuda, "cumsum_static_oob": _mutate(cuda, TOTALS_READ), "cumsum_dyn": dyn,
               "cumsum_dyn_oob": _mutate(dyn, TOTALS_READ)}
    return text + "".join(f"namespace {name} {{\n{src}\n{cpp}\n}}\n" for name, src in sources.items())


@pytest.fixture(scope="session")
def features() -> Any:
    """Built in the default build cache, whose precompiled torch header later runs share."""
    from agentforge.evaluator import native
    from agentforge.evaluator.cuda_emulation.build import load_inline_emulated

    binding = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + "".join(
        f'  m.def("{name}", &{name});\n' for name in FUNCTIONS) + "".join(
        f'  m.def("{name}", &{name}::forward);\n' for name in (*MUTANTS, *CUMSUM_MUTANTS)) + "}\n"
    native._torch_load_inline()
    return load_inline_emulated("emulation_tests", cpp_sources=[(HERE / "features_host.cpp").read_text(), binding],
                                cuda_sources=[(HERE / "features.cu").read_text(), _mutants()])


@pytest.fixture(scope="session")
def plain() -> Any:
    """The shipped relu and its mutant, a module without synchronising calls (the fast path)."""
    from agentforge.evaluator import native
    from agentforge.evaluator.cuda_emulation.build import load_inline_emulated

    cuda, cpp = kernel_sources(RELU)
    sources = {"relu": cuda, "relu_read_past_end": _mutate(cuda, RELU_PAST)}
    binding = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + "".join(
        f'  m.def("{name}", &{name}::forward);\n' for name in sources) + "}\n"
    native._torch_load_inline()
    return load_inline_emulated("emulation_tests_plain", cpp_sources=[binding], cuda_sources=[
        "".join(f"namespace {name} {{\n{src}\n{cpp}\n}}\n" for name, src in sources.items())])
