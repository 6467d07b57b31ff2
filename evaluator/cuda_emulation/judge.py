"""The judge's side of an emulated CUDA run: when it applies, its shapes, and the builds it cannot run."""

from __future__ import annotations

from typing import Any

from agentforge.evaluator.result import EvalJob

# Inputs and parameters of one call, in elements, past which a shape is left out of an emulated
# run (named in the result's execution_note): a CUDA thread costs the emulation a few hundred
# nanoseconds of one core per element it touches, so 2**26 elements is tens of seconds a call,
# times the trials. The tasks' `small` and `odd` variants fit; most `default` ones do not.
MAX_ELEMENTS = 2**26

EXECUTED_ON = "cpu-emulation"
NOTE = ("kernels executed by the CPU emulation (a fiber per CUDA thread, several thread schedules): "
        "correctness only; no timing or speedup exists without a GPU")


def applies(job: EvalJob) -> bool:
    """A CUDA job on a machine without a GPU that asked for more than a compile-only verdict."""
    return job.backend == "cuda" and not job.compile_only and job.emulate


def runnable_shapes(task: Any, shapes: list[str]) -> tuple[list[str], str]:
    """The shapes small enough for the emulation, and a note naming the others."""
    kept, left = [], []
    for shape in shapes:
        numel = task.input_numel(shape)
        if numel is not None and numel > MAX_ELEMENTS:
            left.append(f"{shape} ({numel} elements)")
        else:
            kept.append(shape)
    return kept, ", ".join(left)


def failed_builds(final: dict[str, Any]) -> str:
    """The worker's report of builds the emulation could not make during the run ("" when none)."""
    items = final.get("emulation_failures")
    if not isinstance(items, list) or not items:
        return ""
    unique = list(dict.fromkeys(str(x)[:300] for x in items))
    return "not executed: the CPU emulation could not build: " + "; ".join(unique[:3])
