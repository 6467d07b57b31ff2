"""The loop's typed state. It holds references into the run's artifact store and small figures,
never kernels or logs themselves, so every checkpoint stays small."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict


class KernelRef(TypedDict, total=False):
    """A candidate and its evaluation, by reference."""

    round: int
    candidate_ref: str
    code_hash: str
    result_ref: str | None
    status: str
    accepted: bool
    speedup: float | None  # eager / candidate
    speedup_ci: list[float] | None  # its 95 % interval [lo, hi] (speedup_interval), when timed
    speedup_vs_compile: float | None
    candidate_us: float | None
    eager_us: float | None
    compile_us: float | None
    sol_fraction: float | None
    roofline_label: str | None  # memory-bound | compute-bound | latency-bound, when the roofline knows


class Pending(TypedDict, total=False):
    """This round's work in progress: the coder's reply and what became of it."""

    round: int
    mode: str
    prompt_ref: str
    reply_ref: str
    model: str
    no_code: str | None  # why no candidate could be extracted
    static_error: str | None
    static_fix: str | None  # the smallest fix for what the static check found missing
    duplicate_of: int | None  # the earlier round whose code this reply repeated unchanged
    kernel: KernelRef
    profile_ref: str | None
    knowledge: dict[str, Any]  # the technique notes and exemplars the coder's prompt carried


class RoundRecord(TypedDict, total=False):
    """One finished round, for the history, the live view and the report."""

    round: int
    mode: str
    code_hash: str | None
    status: str  # an EvalResult status, or no_code / static_error / duplicate
    speedup: float | None
    speedup_vs_compile: float | None
    candidate_us: float | None
    best_speedup: float | None
    outcome: str  # new best | kept as base | reverted | not kept | ...
    verdict: str | None  # one line of the verdict that led to this round
    cost_usd: float  # of the run so far
    refs: dict[str, Any]  # artifact references: prompt, reply, candidate, result, verdict, judge
    knowledge: dict[str, Any]  # the technique notes and exemplars the coder's prompt carried


def add_usage(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Token and dollar totals: each node returns only what its own calls cost."""
    left, right = left or {}, right or {}
    keys = ("input_tokens", "output_tokens", "cost_usd", "calls", "retries", "no_code_replies", "evaluations")
    total = {k: left.get(k, 0) + right.get(k, 0) for k in keys}
    unpriced = set(left.get("unpriced_models", [])) | set(right.get("unpriced_models", []))
    total["unpriced_models"] = sorted(unpriced)
    return total


class RunState(TypedDict, total=False):
    run_id: str
    task_ref: str
    task_name: str
    backend: str
    device: str
    round: int  # rounds finished
    mode: str  # the next coder call's mode: initial | repair | optimise
    base: KernelRef | None  # the kernel the next coder call edits
    best: KernelRef | None  # the fastest accepted kernel so far
    verdict_ref: str | None  # the verdict the next coder call follows
    judge_refs: dict[str, Any] | None  # the judge's prompt and reply behind verdict_ref
    needs_judge: bool  # False when the round's verdict was written without the judge
    pending: Pending | None
    failed_repairs: int
    flat_rounds: int  # rounds since the best last improved
    stop_reason: str | None
    approved: bool | None
    finished: bool
    history: Annotated[list[RoundRecord], operator.add]
    usage: Annotated[dict[str, Any], add_usage]
    elapsed_s: Annotated[float, operator.add]  # working time, summed over resumed sessions
