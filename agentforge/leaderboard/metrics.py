"""Leaderboard metrics: pure functions over per-sample outcomes, the suite's task list and run costs.

Definitions (docs/leaderboard.md repeats them for readers):

- A task's outcome is its best sample: the accepted sample with the highest speedup vs eager
  that is not overhead-bound (see below), else (none accepted) its first sample. A task of the
  suite with no sample at all is missing and counts as not correct.
- correctness rate = accepted tasks / all tasks of the suite.
- fast_p = tasks that are accepted and have speedup > p / all tasks of the suite (KernelBench's
  definition; strict inequality). fast_0 is the correctness rate: an accepted task counts
  even when it was not timed.
- Speedups are clipped per task to SPEEDUP_CLIP = [0.01, 100] before averaging, so one broken
  timer (a 10,000x "speedup") or one pathological slowdown cannot dominate the mean.
- An overhead-bound pair (the candidate or the baseline within 20x of the timing harness's own
  floor, issue #17) measured the harness, not the kernel: its ratio is kept in the store but
  no headline figure is drawn from it. Such a task counts as correct and for fast_0, never as
  faster than p > 0, and is left out of the geomeans and medians (vs eager, or vs compile when
  that pair is the bound one); `overhead_bound` counts them.
- geomean / median speedup (vs eager, vs the best torch.compile mode): over accepted tasks with
  a timing that is not overhead-bound. `geomean_speedup_all` is over every task of the suite, a
  task that is missing, not accepted or overhead-bound counting as 1.0 (the user keeps PyTorch):
  it blends correctness with speed.
- mean SoL fraction: over accepted tasks that carry a roofline fraction.
- flag rate = samples with at least one rejecting integrity flag / samples evaluated.
- dollars, tokens and minutes per task: totals over the entry's optimisation runs / runs.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

SPEEDUP_CLIP: tuple[float, float] = (0.01, 100.0)
FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 1.0, 1.2, 1.5, 2.0)


@dataclass(frozen=True)
class SampleOutcome:
    """What the metrics need from one evaluation (a row of the store, or an EvalResult)."""

    task: str
    accepted: bool
    speedup: float | None = None
    speedup_vs_compile: float | None = None
    sol_fraction: float | None = None
    flagged: bool = False  # any rejecting integrity flag
    sample: int = 0
    status: str = "ok"
    overhead_bound: bool = False  # the candidate / eager pair is within 20x of the harness floor
    overhead_bound_vs_compile: bool = False  # the same for the pair with the best torch.compile mode
    reason: str = ""  # why it got its status, in one line (task_rows.verdict_details)
    speedup_ci: tuple[float, float] | None = None  # the speedup's interval, when the verdict has one

    @property
    def headline_speedup(self) -> float | None:
        """`speedup`, unless the pair is overhead-bound (then no figure to headline)."""
        return None if self.overhead_bound else self.speedup

    @property
    def headline_speedup_vs_compile(self) -> float | None:
        return None if self.overhead_bound_vs_compile else self.speedup_vs_compile


@dataclass(frozen=True)
class RunCost:
    task: str
    cost_usd: float
    tokens: int
    minutes: float


@dataclass(frozen=True)
class EntryMetrics:
    n_tasks: int
    n_evaluated: int  # tasks with at least one sample
    n_samples: int
    correctness_rate: float
    fast_p: dict[float, float]
    geomean_speedup: float | None
    median_speedup: float | None
    geomean_speedup_all: float | None
    geomean_speedup_vs_compile: float | None
    median_speedup_vs_compile: float | None
    mean_sol_fraction: float | None
    flag_rate: float | None
    n_overhead_bound: int = 0  # accepted tasks whose best sample's eager pair is overhead-bound
    usd_per_task: float | None = None
    tokens_per_task: float | None = None
    minutes_per_task: float | None = None
    per_task: dict[str, SampleOutcome] = field(default_factory=dict)

    def as_row(self) -> dict[str, float | int | None]:
        """Flat figures for tables and JSON."""
        row: dict[str, float | int | None] = {
            "n_tasks": self.n_tasks, "n_evaluated": self.n_evaluated, "n_samples": self.n_samples,
            "correct": self.correctness_rate, "overhead_bound": self.n_overhead_bound,
        }
        row.update({f"fast_{p:g}": v for p, v in self.fast_p.items()})
        row.update(
            geomean=self.geomean_speedup, median=self.median_speedup, geomean_all=self.geomean_speedup_all,
            geomean_vs_compile=self.geomean_speedup_vs_compile,
            median_vs_compile=self.median_speedup_vs_compile,
            sol=self.mean_sol_fraction, flag_rate=self.flag_rate, usd_per_task=self.usd_per_task,
            tokens_per_task=self.tokens_per_task, minutes_per_task=self.minutes_per_task,
        )
        return row


def clip(value: float, bounds: tuple[float, float] = SPEEDUP_CLIP) -> float:
    low, high = bounds
    return min(max(value, low), high)


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values; None for none."""
    vals = list(values)
    if not vals:
        return None
    if any(v <= 0 for v in vals):
        raise ValueError("geomean needs positive values; clip them first")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def median(values: Iterable[float]) -> float | None:
    vals = list(values)
    return statistics.median(vals) if vals else None


def overhead_flags(result_json: str) -> dict[str, bool]:
    """`overhead_bound` and `overhead_bound_vs_compile` of one stored EvalResult (its JSON).

    Read from the verdict's headline fields (a speedup without a headline is overhead-bound), or,
    in a record written before those fields, from the timing's list of overhead-bound subjects.
    Unreadable or untimed results are not overhead-bound."""
    try:
        data = json.loads(result_json)
    except (TypeError, ValueError):
        return {"overhead_bound": False, "overhead_bound_vs_compile": False}
    if not isinstance(data, dict):
        return {"overhead_bound": False, "overhead_bound_vs_compile": False}
    if "headline_speedup" in data:
        return {
            "overhead_bound": data.get("speedup") is not None and data.get("headline_speedup") is None,
            "overhead_bound_vs_compile": data.get("speedup_vs_compile") is not None
            and data.get("headline_speedup_vs_compile") is None,
        }
    timing = data.get("timing") if isinstance(data.get("timing"), dict) else {}
    bound = set(timing.get("overhead_bound") or ())
    compile_bound = any(str(name).startswith("compile") for name in bound)
    return {"overhead_bound": bool({"candidate", "eager"} & bound),
            "overhead_bound_vs_compile": "candidate" in bound or compile_bound}


def best_per_task(samples: Iterable[SampleOutcome]) -> dict[str, SampleOutcome]:
    """Each task's best sample: the fastest accepted one, else its lowest-numbered sample."""
    best: dict[str, SampleOutcome] = {}
    for s in sorted(samples, key=lambda s: (s.task, s.sample)):
        held = best.get(s.task)
        if held is None or _better(s, held):
            best[s.task] = s
    return best


def _better(a: SampleOutcome, b: SampleOutcome) -> bool:
    if a.accepted != b.accepted:
        return a.accepted
    return a.accepted and (a.headline_speedup or 0.0) > (b.headline_speedup or 0.0)


def fast_p(per_task: Mapping[str, SampleOutcome], suite_tasks: Sequence[str], p: float) -> float:
    """Share of ALL suite tasks that are accepted and faster than p x eager (p = 0: accepted)."""
    if not suite_tasks:
        return 0.0
    hits = 0
    for task in suite_tasks:
        o = per_task.get(task)
        if o is None or not o.accepted:
            continue
        if p == 0.0 or (o.headline_speedup is not None and o.headline_speedup > p):
            hits += 1
    return hits / len(suite_tasks)


def summarize(
    samples: Sequence[SampleOutcome], suite_tasks: Sequence[str], runs: Sequence[RunCost] = (),
    *, clip_bounds: tuple[float, float] = SPEEDUP_CLIP, thresholds: Sequence[float] = FAST_P_THRESHOLDS,
) -> EntryMetrics:
    """Every metric of one entry on one suite and track."""
    in_suite = set(suite_tasks)
    samples = [s for s in samples if s.task in in_suite]
    per_task = best_per_task(samples)
    accepted = [per_task[t] for t in suite_tasks if t in per_task and per_task[t].accepted]
    eager = [clip(o.headline_speedup, clip_bounds) for o in accepted if o.headline_speedup is not None]
    compiled = [clip(o.headline_speedup_vs_compile, clip_bounds) for o in accepted
                if o.headline_speedup_vs_compile is not None]
    everyone = [
        clip(per_task[t].headline_speedup, clip_bounds)  # type: ignore[arg-type]
        if t in per_task and per_task[t].accepted and per_task[t].headline_speedup is not None else 1.0
        for t in suite_tasks
    ]
    sols = [o.sol_fraction for o in accepted if o.sol_fraction is not None]
    n = len(runs)
    return EntryMetrics(
        n_tasks=len(suite_tasks), n_evaluated=len(per_task), n_samples=len(samples),
        correctness_rate=fast_p(per_task, suite_tasks, 0.0),
        fast_p={p: fast_p(per_task, suite_tasks, p) for p in thresholds},
        geomean_speedup=geomean(eager), median_speedup=median(eager),
        geomean_speedup_all=geomean(everyone),
        geomean_speedup_vs_compile=geomean(compiled), median_speedup_vs_compile=median(compiled),
        mean_sol_fraction=statistics.fmean(sols) if sols else None,
        flag_rate=sum(s.flagged for s in samples) / len(samples) if samples else None,
        n_overhead_bound=sum(o.overhead_bound and o.speedup is not None for o in accepted),
        usd_per_task=sum(r.cost_usd for r in runs) / n if n else None,
        tokens_per_task=sum(r.tokens for r in runs) / n if n else None,
        minutes_per_task=sum(r.minutes for r in runs) / n if n else None,
        per_task=per_task,
    )
