"""Each stage's share of the job's wall clock, enforced by the judge (the sandbox child).

The job has one wall-clock limit (`SandboxConfig.timeout_s`, 600 s by default) after which the
sandbox parent kills everything and nothing of the verdict survives. `StageBudget` (in the job)
shares it out: the stage groups build, correctness, timing and profile each may run until their
cumulative share of the usable total is spent (what a stage leaves unused passes on), and a
reserve at the end is kept for writing the verdict.

`StageClock` watches the deadline of the stage running now from a thread of the judge. When it
passes, the clock marks the stage as run out and kills the candidate worker (not for the profile,
which does not use it): the judge's pending request fails at once and the pipeline hands back the
verdict kept for that case, the records of every finished stage with status `timeout` at the
stage that ran out (for the profile: the verdict stands, with no profile). If the judge itself does
not come back within a grace period (its own baselines, a hung reference, ncu), the clock writes
the kept verdict through the writer the sandbox child registered (`set_writer`) and the child
exits, still before the parent's hard limit.

The clock also writes one line on the child's stderr as each stage group starts (`STAGE_MARK`),
so that when even the grace period passes (the judge stuck in a native call that holds the GIL,
so the clock's own thread cannot run) the parent's hard-limit verdict can say which stage the job
was in. stderr is shared with the candidate, so that line is said as what it is (the last mark on
stderr), in the message only; the verdict's stage stays `sandbox`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable

from agentforge.evaluator.result import (
    ErrorRecord,
    EvalResult,
    ProfileRecord,
    Stage,
    StageBudget,
    Status,
)

GROUPS = ("build", "correctness", "timing", "profile")
GROUP_OF = {Stage.SANDBOX: "build", Stage.TASK: "build", Stage.BUILD: "build", Stage.LOAD: "build",
            Stage.CORRECTNESS: "correctness", Stage.INTEGRITY: "correctness", Stage.TIMING: "timing",
            Stage.PROFILE: "profile", Stage.DONE: "profile"}
RESERVE_S = 15.0  # at most this much of the total is kept back for writing the verdict
RESERVE_FRACTION = 0.1  # and at most this share of it (short test budgets)
MIN_RESERVE_S = 1.0

STAGE_MARK = "agentforge judge: stage "
_MARK_LINE = re.compile(r"^agentforge judge: stage (build|correctness|timing|profile) at (\d+(?:\.\d+)?) s$",
                        re.MULTILINE)

_writer: Callable[[EvalResult], None] | None = None  # the sandbox child's: send a verdict, then exit


def set_writer(writer: Callable[[EvalResult], None] | None) -> None:
    """What the clock calls with the kept verdict when the judge is stuck past a deadline (the
    sandbox child sends it on the result channel and exits; it does not return)."""
    global _writer
    _writer = writer


def for_sandbox(budget: StageBudget, timeout_s: float, now: float | None = None,
                shares: tuple[tuple[str, float], ...] = ()) -> StageBudget:
    """The job's budget inside a sandbox whose wall clock (`timeout_s`) starts now: its total is at
    most that limit, and the judge counts from the parent's start, not its own. `shares` (the
    sandbox's `stage_shares`, from the `sandbox.stage_budget` setting) replace the job's own."""
    total = min(budget.total_s, timeout_s) if budget.total_s > 0 else timeout_s
    return dataclasses.replace(budget, total_s=float(total), **dict(shares),
                               started_monotonic=time.monotonic() if now is None else now)


def last_stage_mark(stderr_tail: str) -> str:
    """The last stage mark in a child's stderr, in words ('' when none): what the hard-limit
    verdict says of where the job was."""
    marks = _MARK_LINE.findall(stderr_tail)
    if not marks:
        return ""
    group, at = marks[-1]
    return f"the judge's last stage mark on stderr: {group}, from {at} s"


def parse_shares(text: str) -> dict[str, float]:
    """`build=0.7,correctness=0.2,...` (any of the four groups; '' for the defaults) as shares;
    a ValueError saying what is wrong otherwise (also shares that add up to more than 1)."""
    shares: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in GROUPS:
            raise ValueError(f"stage budget part {part!r}: use GROUP=FRACTION with GROUP one of {', '.join(GROUPS)}")
        if name in shares:
            raise ValueError(f"stage budget names {name} twice")
        try:
            shares[name] = float(value)
        except ValueError:
            raise ValueError(f"stage budget part {part!r}: {value.strip()!r} is not a number") from None
    return check_shares(shares)


def check_shares(shares: dict[str, float]) -> dict[str, float]:
    """`shares` when they name stage groups and make a valid budget with the other defaults
    (each in [0, 1], at most 1 in all); a ValueError saying what is wrong otherwise."""
    unknown = sorted(set(shares) - set(GROUPS))
    if unknown:
        raise ValueError(f"stage budget names {', '.join(unknown)}; the groups are {', '.join(GROUPS)}")
    StageBudget(**shares)
    return shares


def reserve_s(total_s: float) -> float:
    return min(RESERVE_S, max(MIN_RESERVE_S, RESERVE_FRACTION * total_s), total_s / 2)


def deadlines(budget: StageBudget) -> dict[str, float]:
    """Seconds from the job's start at which each stage group runs out (cumulative shares)."""
    usable = budget.total_s - reserve_s(budget.total_s)
    out, spent = {}, 0.0
    for group in GROUPS:
        spent += getattr(budget, group)
        out[group] = usable * min(spent, 1.0)
    return out


@dataclasses.dataclass(frozen=True)
class RanOut:
    """The stage that ran out of its budget, when, and after how long it had run."""

    stage: Stage
    group: str
    after_s: float  # how long the stage group had run when it was stopped
    at_s: float  # seconds since the job's start
    deadline_s: float  # the group's deadline, seconds since the job's start


class StageClock:
    """The judge's clock over the stages of one job (inactive when the budget has no total)."""

    def __init__(self, budget: StageBudget, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget, self._now = budget, clock
        self.active = budget.total_s > 0
        now = clock()
        started = budget.started_monotonic
        # The parent's clock start, when it is one this machine's clock can have read (same host).
        self.origin = started if started is not None and 0.0 <= now - started <= budget.total_s else now
        self.deadlines = deadlines(budget) if self.active else {}
        self.grace_s = reserve_s(budget.total_s) / 2 if self.active else 0.0
        self.stage = Stage.TASK
        self.ran_out: RanOut | None = None
        self.used: dict[str, float] = {}
        self._group = ""
        self._entered = now
        self._kept: EvalResult | None = None
        self._worker_pid: int | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def elapsed(self) -> float:
        return self._now() - self.origin

    def left_s(self) -> float:
        """Seconds left to the stage running now (infinite when inactive)."""
        if not self.active or not self._group:
            return math.inf
        return max(0.0, self.deadlines[self._group] - self.elapsed())

    def watch_worker(self, pid: int) -> None:
        """The candidate worker to stop when a stage that uses it runs out."""
        self._worker_pid = pid

    def enter(self, stage: Stage, kept: EvalResult | None) -> None:
        """`stage` starts; `kept` is the verdict if it runs out (the finished stages' records)."""
        if not self.active:
            return
        group = GROUP_OF[stage]
        with self._lock:
            if self._closed or self.ran_out is not None:  # the verdict is the one kept when it ran out
                return
            now = self._now()
            changed = group != self._group
            if changed:
                if self._group:
                    self.used[self._group] = round(self.used.get(self._group, 0.0) + now - self._entered, 3)
                self._group, self._entered = group, now
            self.stage, self._kept = stage, kept
        if changed:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"{STAGE_MARK}{group} at {now - self.origin:.1f} s\n")
                sys.stderr.flush()
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="agentforge-stage-clock", daemon=True)
            self._thread.start()
        self._wake.set()

    def close(self, result: EvalResult) -> EvalResult:
        """The verdict to hand back: the kept one when a stage ran out, else `result` with what each
        stage used, in its provenance."""
        if not self.active:
            return result
        with self._lock:
            self._closed = True
            ran_out, kept = self.ran_out, self._kept
            if self._group and ran_out is None:
                self.used[self._group] = round(self.used.get(self._group, 0.0) + self._now() - self._entered, 3)
        self._wake.set()
        if ran_out is not None and kept is not None:
            return self.timed_out(kept, ran_out)
        return _with_report(result, self.report())

    def report(self) -> dict[str, object]:
        return {"total_s": self.budget.total_s, "deadlines_s": {k: round(v, 3) for k, v in self.deadlines.items()},
                "used_s": dict(self.used),
                "ran_out": None if self.ran_out is None else dataclasses.asdict(self.ran_out)}

    def timed_out(self, kept: EvalResult, ran_out: RanOut) -> EvalResult:
        """The kept verdict, saying which stage ran out and after how long."""
        what = (f"the {ran_out.group} stage ran out of its budget after {ran_out.after_s:.1f} s "
                f"(its deadline: {ran_out.deadline_s:.1f} s into the job's {self.budget.total_s:g} s)")
        if ran_out.group == "profile":  # optional: the verdict the earlier stages earned stands
            result = dataclasses.replace(kept, profile=ProfileRecord(available=False, reason=what),
                                         stage=Stage.DONE if kept.status == Status.OK else kept.stage)
        else:
            result = dataclasses.replace(kept, status=Status.TIMEOUT, stage=ran_out.stage,
                                         error=ErrorRecord(type="StageTimeout", message=what))
        return _with_report(result, self.report())

    def _watch(self) -> None:
        while True:
            self._wake.wait(timeout=max(0.0, min(self.left_s(), 60.0)))
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                if self.left_s() > 0:
                    continue
                at = self.elapsed()
                self.ran_out = RanOut(self.stage, self._group, round(self._now() - self._entered, 3), round(at, 3),
                                      round(self.deadlines[self._group], 3))
                kept, pid = self._kept, self._worker_pid
            if self._group != "profile" and pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)  # the judge's pending request fails now
            self._abandon_after_grace(kept)
            return

    def _abandon_after_grace(self, kept: EvalResult | None) -> None:
        """The judge did not hand its verdict back in time: write the kept one ourselves."""
        deadline = self._now() + self.grace_s
        while self._now() < deadline:
            with self._lock:
                if self._closed:
                    return
            time.sleep(min(0.05, max(0.0, deadline - self._now())))
        with self._lock:
            if self._closed or kept is None or _writer is None or self.ran_out is None:
                return
            self._closed = True
            result = self.timed_out(kept, self.ran_out)
        _writer(result)


def _with_report(result: EvalResult, report: dict[str, object]) -> EvalResult:
    prov = result.provenance
    settings = {**prov.track_settings, "stage_budget": report}
    return dataclasses.replace(result, provenance=dataclasses.replace(prov, track_settings=settings))
