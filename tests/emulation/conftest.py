"""One emulated build per test session: the feature kernels and the planted softmax mutants in one
extension (the host compiler takes most of a minute per build on two loaded cores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FUNCTIONS = ["ids", "sum", "warps", "barriers", "atomic_ops", "half_ops", "group_ops", "hang", "shuffle_exit",
             "launch_error", "last_error_after", "reset_device", "sticky_error"]
SOFTMAX = REPO / "results" / "kernels" / "h100" / "level1" / "softmax" / "kernel.py"
# A removed __syncthreads (a race on the block's scratch, which the thread schedules expose) and a
# loop bound one short (the last column never written: the scalar path of shapes like `odd` only).
BARRIER = ("    if (lane == 0) { scratch_m[warp] = acc.m; scratch_s[warp] = acc.s; }\n    __syncthreads();\n",
           "    if (lane == 0) { scratch_m[warp] = acc.m; scratch_s[warp] = acc.s; }\n")
BOUND = ("for (long j = lane; j < cols; j += lanes) yr[j]", "for (long j = lane; j < cols - 1; j += lanes) yr[j]")
MUTANTS = ("original", "no_barrier", "short_bound")


def softmax_sources() -> tuple[str, str]:
    """CUDA_SRC and CPP_SRC of the shipped softmax kernel, as its module computes them."""
    seen: dict[str, Any] = {}
    text = SOFTMAX.read_text().replace("from torch.utils.cpp_extension import load_inline", "")
    exec(compile(text, str(SOFTMAX), "exec"), {"load_inline": lambda **kw: seen.update(kw), "__name__": "k"})
    return seen["cuda_sources"], seen["cpp_sources"]


def _mutants() -> str:
    cuda, cpp = softmax_sources()
    assert cuda.count(BARRIER[0]) == 1 and cuda.count(BOUND[0]) == 1, "the shipped kernel changed: update the mutants"
    sources = {"original": cuda, "no_barrier": cuda.replace(*BARRIER), "short_bound": cuda.replace(*BOUND)}
    return "".join(f"namespace {name} {{\n{src}\n{cpp}\n}}\n" for name, src in sources.items())


@pytest.fixture(scope="session")
def features() -> Any:
    """Built in the default build cache, whose precompiled torch header later runs share."""
    from agentforge.evaluator import native
    from agentforge.evaluator.cuda_emulation.build import load_inline_emulated

    binding = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + "".join(
        f'  m.def("{name}", &{name});\n' for name in FUNCTIONS) + "".join(
        f'  m.def("{name}", &{name}::forward);\n' for name in MUTANTS) + "}\n"
    native._torch_load_inline()
    return load_inline_emulated("emulation_tests", cpp_sources=[(HERE / "features_host.cpp").read_text(), binding],
                                cuda_sources=[(HERE / "features.cu").read_text(), _mutants()])
