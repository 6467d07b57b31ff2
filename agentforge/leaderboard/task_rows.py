"""Per-task rows of a board: each suite task's status, why it got it, and its speedup.

A board's summary row says how many tasks passed; these rows say which, and why the others did
not, read from the stored verdict (its error, the failed correctness check, the rejecting flag)
or, for a task with no verdict, from the entry's optimisation run (its loop kept no correct
kernel, failed, or the task failed before any candidate ran).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REASON_CHARS = 400  # a reason is one line of a table: long compiler logs are cut to this
MISSING = "missing"


@dataclass(frozen=True)
class TaskRow:
    task: str
    status: str  # a verdict's status (ok, crash, ...), or the loop's (no kernel, failed, ...), or missing
    reason: str
    accepted: bool = False
    speedup: float | None = None  # vs eager, as stored (overhead-bound ratios included)
    speedup_ci: tuple[float, float] | None = None
    overhead_bound: bool = False


def verdict_details(result_json: str) -> tuple[str, tuple[float, float] | None]:
    """Why a stored EvalResult (its JSON) got its status, in one line, and the interval of its
    speedup when the verdict carries one. Read as plain data, so a verdict written by an older or
    newer evaluator still gives what it has."""
    try:
        data = json.loads(result_json)
    except (TypeError, ValueError):
        return "the stored verdict is not readable JSON", None
    if not isinstance(data, dict):
        return "the stored verdict is not a JSON object", None
    return _reason(data), speedup_interval(data)


def speedup_interval(data: Mapping[str, Any]) -> tuple[float, float] | None:
    """`speedup_ci` of a verdict (top level or in its timing), as [low, high] or {low, high}."""
    timing = data.get("timing") if isinstance(data.get("timing"), dict) else {}
    for raw in (data.get("speedup_ci"), timing.get("speedup_ci")):
        pair = _pair(raw)
        if pair is not None:
            return pair
    return None


def _pair(raw: Any) -> tuple[float, float] | None:
    if isinstance(raw, dict):
        raw = (raw.get("low", raw.get("lo")), raw.get("high", raw.get("hi")))
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        return None
    try:
        low, high = float(raw[0]), float(raw[1])
    except (TypeError, ValueError):
        return None
    return (low, high) if math.isfinite(low) and math.isfinite(high) and low <= high else None


def _reason(data: Mapping[str, Any]) -> str:
    status = str(data.get("status", "?"))
    error = data.get("error") if isinstance(data.get("error"), dict) else None
    flags = [f for f in data.get("flags") or () if isinstance(f, dict) and f.get("severity", "reject") == "reject"]
    failed = [r for r in data.get("correctness") or () if isinstance(r, dict) and not r.get("passed", True)]
    if status == "ok" and data.get("accepted", True):
        timing = data.get("timing") if isinstance(data.get("timing"), dict) else {}
        if data.get("speedup") is not None and data.get("headline_speedup", data.get("speedup")) is None:
            return "accepted; overhead-bound (within 20x of the timing harness's floor): no headline speedup"
        shape = timing.get("shape")
        text = f"accepted, timed on shape '{shape}'" if shape else "accepted (not timed)"
        noise = _line(str(data.get("noise_note") or ""))  # the evaluator's word on a too-wide interval
        return f"{text}; {noise}" if noise else text
    if flags:
        return "; ".join(f"integrity flag {f.get('rule')}: {_line(str(f.get('evidence', '')))}" for f in flags[:2])
    if failed:
        r = failed[0]
        what = r.get("failed_check") or "mismatch"
        err = f", max abs err {r['max_abs_err']:.3g}" if isinstance(r.get("max_abs_err"), int | float) else ""
        message = f": {_line(str(r['message']))}" if r.get("message") else ""
        return f"shape '{r.get('shape')}': {what}{err}{message}"
    if error is not None:
        text = f"{error.get('type', 'error')}: {_line(str(error.get('message', '')))}"
        if error.get("signal"):
            text += f" (killed by signal {error['signal']})"
        return text
    compile_record = data.get("compile") if isinstance(data.get("compile"), dict) else None
    if compile_record and not compile_record.get("ok", True):
        return f"build failed: {_line(str(compile_record.get('log_tail', '')), last=True)}"
    return f"{status} at stage {data.get('stage', '?')}"


def _line(text: str, *, last: bool = False) -> str:
    """One line of at most REASON_CHARS: the first non-empty line (or the last, for a log)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = (lines[-1] if last else lines[0]) if lines else ""
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def run_reason(status: str, summary: Mapping[str, Any]) -> tuple[str, str]:
    """The (status, reason) of a task that has no verdict on the board, from its optimisation run."""
    if summary.get("rank_error"):
        return "task_error", _line(str(summary["rank_error"]))
    if status == "failed":
        return "failed", _line(str(summary.get("error") or "the optimisation run raised"))
    if status == "running":
        return "unfinished", "its loop did not finish; run the same command again to resume it"
    stop = summary.get("stop_reason") or "no stop reason recorded"
    if status == "done" and not summary.get("best_source"):
        rounds = summary.get("rounds")
        within = f" in {rounds} round{'s' if rounds != 1 else ''}" if isinstance(rounds, int) else ""
        return "no kernel", _line(f"its loop kept no correct kernel{within} ({stop})")
    if status == "done":
        return MISSING, "its best kernel has no verdict on this track yet; run the same command again"
    return status, _line(f"its loop stopped: {stop}")


def task_rows(
    suite_tasks: Sequence[str], per_task: Mapping[str, Any], runs: Mapping[str, tuple[str, Mapping[str, Any]]],
) -> list[TaskRow]:
    """One row per suite task, in suite order: from its best sample (`SampleOutcome`) when it
    has one, else from its run (`runs`: task -> (status, summary)), else missing."""
    rows = []
    for task in suite_tasks:
        outcome = per_task.get(task)
        if outcome is not None:
            # "ok" only when accepted: a verdict that passed its stages but carries a rejecting flag
            status = "rejected" if outcome.status == "ok" and not outcome.accepted else outcome.status
            rows.append(TaskRow(task, status, outcome.reason, outcome.accepted, outcome.speedup,
                                outcome.speedup_ci, outcome.overhead_bound))
        elif task in runs:
            status, summary = runs[task]
            rows.append(TaskRow(task, *run_reason(status, summary)))
        else:
            rows.append(TaskRow(task, MISSING, "no evaluation stored for this task"))
    return rows
