"""The search's pure decisions: how a round's proposals are shared among the beam, what each
proposal is asked to try, and which kernels form the next beam."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from agentforge.agent.state import KernelRef


class BeamEntry(TypedDict, total=False):
    """A kernel carried to the next round (or none yet: the initial entry), with the verdict its
    children follow."""

    node: str | None  # its id in the search tree (r<round>c<i>), None for the root
    mode: str  # initial | repair | optimise
    base: KernelRef | None
    verdict_ref: str | None
    judge_refs: dict[str, Any] | None
    needs_judge: bool
    failed_repairs: int  # failed repairs along this line


ROOT: BeamEntry = {"node": None, "mode": "initial", "base": None, "verdict_ref": None, "judge_refs": None,
                   "needs_judge": False, "failed_repairs": 0}

# What the proposals from one parent try, in order: the first follows the verdict as written, the
# others spread out, so that N proposals are N different attempts, not N samples of one.
STRATEGIES = {
    "initial": (
        "the simplest correct kernel, written plainly, so later rounds have a correct base",
        "one pass over the data with a vectorisable inner loop (contiguous access, no branches in it)",
        "parallelise the outermost independent dimension (OpenMP threads on a CPU, blocks on a GPU)",
        "aim at the roofline floor from the start: fuse every elementwise step and read each input once",
    ),
    "repair": (
        "the smallest fix for the judge's diagnosis, changing nothing else",
        "rewrite the failing part in a simpler, obviously correct form; keep the rest",
        "fix the diagnosis and check every shape variant's sizes, including ones that are not tile multiples",
        "the smallest fix, with the riskiest optimisation of this kernel taken back out",
    ),
    "optimise": (
        "apply the judge's recommendation as written",
        "apply the recommendation with a different implementation (loop order, blocking, vector width)",
        "attack the same bottleneck with a different technique from the technique notes than the recommended one",
        "keep the algorithm and tune its parameters (tile sizes, unroll factors, threads, launch shape)",
    ),
}
TEMPERATURES = (0.2, 0.6, 0.9, 1.0)


def allocate(candidates: int, beam: Sequence[BeamEntry]) -> list[tuple[int, int]]:
    """(beam index, index among that entry's proposals) per proposal; the best entry first and,
    when the proposals do not divide evenly, with the larger share."""
    entries = list(range(min(len(beam), candidates))) or [0]
    slots: list[tuple[int, int]] = []
    for k in range(candidates):
        entry = entries[k % len(entries)]
        slots.append((entry, k // len(entries)))
    return slots


def strategy(mode: str, index: int) -> tuple[str, float]:
    """What the index-th proposal from one parent tries, and at what temperature."""
    options = STRATEGIES[mode]
    return options[index % len(options)], TEMPERATURES[min(index, len(TEMPERATURES) - 1)]


def speed_key(kernel: KernelRef) -> float:
    """Higher is faster: speedup vs eager when known, else the inverse of the kernel's time."""
    if kernel.get("speedup") is not None:
        return float(kernel["speedup"])  # type: ignore[arg-type]
    us = kernel.get("candidate_us")
    return 1.0 / float(us) if us else 0.0


def beats(new: KernelRef, old: KernelRef) -> bool:
    """Whether `new` is faster than `old` beyond the noise: with speedup intervals on both sides,
    new's interval must lie wholly above old's (`speedup_interval.clears`); without, the points
    decide (`speed_key`)."""
    from agentforge.evaluator.speedup_interval import clears

    if new.get("speedup") is not None and old.get("speedup") is not None:
        new_ci, old_ci = new.get("speedup_ci"), old.get("speedup_ci")
        return clears(tuple(new_ci) if new_ci else None, tuple(old_ci) if old_ci else None,  # type: ignore[arg-type]
                      float(new["speedup"]), float(old["speedup"]))  # type: ignore[arg-type]
    return speed_key(new) > speed_key(old)


def rank(kernels: Sequence[KernelRef]) -> list[KernelRef]:
    """Accepted kernels, fastest first, one per code hash."""
    seen: set[str] = set()
    ranked = []
    for kernel in sorted((k for k in kernels if k.get("accepted")), key=speed_key, reverse=True):
        if kernel["code_hash"] not in seen:
            seen.add(kernel["code_hash"])
            ranked.append(kernel)
    return ranked
