"""What a `--backend cuda` job gets on a machine without a GPU, said before it runs.

Without a GPU nothing can time a CUDA kernel. What runs instead: nvcc compiles every build the
candidate makes, for the job's architecture (the compile-only verdict), and the CPU emulation
executes its kernels for the correctness stage on the shapes small enough for it (at most
`MAX_ELEMENTS` input and parameter elements); larger shapes are compiled only. Without nvcc
nothing can judge CUDA at all, and the job is refused with what to do. Used by `preflight`, so
`eval` and `optimize` say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentforge.evaluator.result import EvalJob


@dataclass(frozen=True)
class NoGpuPlan:
    executed: tuple[str, ...]  # the shapes the CPU emulation runs
    compiled_only: tuple[str, ...]  # the shapes too large for it
    note: str  # one line for the user


def cuda_without_gpu(job: EvalJob, figures: dict[str, Any], wanted: tuple[str, ...]) -> NoGpuPlan | None:
    """None unless `job` is a CUDA job and the probe saw no GPU; else what runs instead. Raises
    PreflightError when nothing can (no nvcc)."""
    from agentforge.agent.preflight import PreflightError
    from agentforge.evaluator.cuda_emulation.judge import MAX_ELEMENTS
    from agentforge.evaluator.worker.compile_only import find_nvcc

    memory = figures.get("memory") or {}
    if job.backend != "cuda" or memory.get("kind") == "cuda":
        return None
    head = f"no GPU here: --backend cuda gets nvcc's compile-only verdict for {job.cuda_arch}"
    if find_nvcc() is None:
        raise PreflightError("NoCudaToolchain", "no GPU and no nvcc here: nothing can build or run CUDA code; "
                             "install the CUDA toolkit (nvcc on PATH) for a compile-only verdict with the CPU "
                             "emulation, or use --backend cpu", job.task_name)
    if job.compile_only or not job.emulate:
        return NoGpuPlan((), wanted, f"{head} alone (nothing is executed, no timing)")
    shapes = figures.get("shapes") or {}
    small = tuple(s for s in wanted if (numel := (shapes.get(s) or {}).get("numel")) is None or numel <= MAX_ELEMENTS)
    large = tuple(s for s in wanted if s not in small)
    over = f"over {MAX_ELEMENTS:,} elements"
    left = f"; too large to emulate ({over}), compiled only: {', '.join(large)}" if large else ""
    if not small:
        return NoGpuPlan((), large, f"{head} alone: every shape asked for is too large for the CPU emulation "
                         f"({over}: {', '.join(large)}); a smaller --shape runs its kernels")
    return NoGpuPlan(small, large, f"{head}, and its kernels run in the CPU emulation on {', '.join(small)} "
                     f"(correctness only: no timing or speedup without a GPU){left}")
