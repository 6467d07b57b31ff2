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


def triton_without_gpu(job: EvalJob, figures: dict[str, Any], wanted: tuple[str, ...]) -> NoGpuPlan | None:
    """None unless `job` is a Triton job and the probe saw no GPU; else which shapes Triton's
    interpreter runs (at most `triton_interpret.MAX_ELEMENTS` elements: a larger one would run for
    many minutes; the evaluator dry-launches and compiles it instead). Raises PreflightError when a
    shape asked for by name, or every shape, is too large for it, naming the shapes that fit."""
    from agentforge.agent.preflight import PreflightError
    from agentforge.evaluator.worker.triton_interpret import MAX_ELEMENTS

    memory = figures.get("memory") or {}
    if job.backend != "triton" or memory.get("kind") == "cuda" or job.compile_only:
        return None
    shapes = figures.get("shapes") or {}
    fits = interpretable(figures, tuple(shapes))
    small = tuple(s for s in wanted if s in fits)
    large = tuple(s for s in wanted if s not in fits)
    over = f"over {MAX_ELEMENTS:,} elements"
    advice = (f"shapes it runs: {', '.join(fits)} (run with {' '.join(f'--shape {s}' for s in fits)})" if fits
              else "no shape of this task is small enough (declare a smaller variant in its SHAPES)")
    if large and (job.shapes or not small):
        raise PreflightError("ShapeTooLarge", f"{job.task_name}: no GPU here, so --backend triton runs in Triton's "
                             f"interpreter, where {', '.join(repr(s) for s in large)} ({over}) would run for many "
                             f"minutes; {advice}", job.task_name, shapes_that_fit=list(fits))
    head = f"no GPU here: --backend triton runs in Triton's interpreter on {', '.join(small)}"
    left = f"; not run in it ({over}): {', '.join(large)}" if large else ""
    return NoGpuPlan(small, large, f"{head} (correctness only: no timing without a GPU), then compiles what it "
                     f"launched for {job.cuda_arch}{left}")


def interpretable(figures: dict[str, Any], shapes: tuple[str, ...]) -> tuple[str, ...]:
    """Of `shapes`, those small enough for Triton's interpreter (unsized ones count as small: the
    evaluator's own task check says what is wrong with them)."""
    from agentforge.evaluator.worker.triton_interpret import MAX_ELEMENTS

    sized = figures.get("shapes") or {}
    return tuple(s for s in shapes if (numel := (sized.get(s) or {}).get("numel")) is None or numel <= MAX_ELEMENTS)
