"""Standings: the metrics of every (entry, suite, track) in the results store, ranked."""

from __future__ import annotations

from dataclasses import dataclass

from agentforge.leaderboard.metrics import EntryMetrics, RunCost, SampleOutcome, overhead_flags, summarize
from agentforge.leaderboard.task_rows import TaskRow, task_rows, verdict_details
from agentforge.store import ResultsStore, StoredEvaluation


@dataclass(frozen=True)
class Standing:
    entry: str
    suite: str
    track: str
    metrics: EntryMetrics
    levels: dict[str, int | None]  # task -> level, for per-level views
    rows: tuple[TaskRow, ...] = ()  # one per suite task: status, reason, speedup


def outcome(row: StoredEvaluation) -> SampleOutcome:
    reason, interval = verdict_details(row.result_json)
    return SampleOutcome(
        task=row.task, accepted=row.accepted, speedup=row.speedup, speedup_vs_compile=row.speedup_vs_compile,
        sol_fraction=row.sol_fraction, flagged=row.n_flags > 0, sample=row.sample, status=row.status,
        reason=reason, speedup_ci=interval, **overhead_flags(row.result_json),
    )


def standings(store: ResultsStore, *, suite: str | None = None, track: str | None = None) -> list[Standing]:
    """Every board in the store (filtered), ranked by sort_key."""
    found = [standing(store, entry, board_suite, board_track) for entry, board_suite, board_track in _boards(store)
             if (suite is None or board_suite == suite) and (track is None or board_track == track)]
    return sorted(found, key=sort_key)


def _boards(store: ResultsStore) -> list[tuple[str, str, str]]:
    """The stored boards, and a board for each entry that ran a suite with no verdict stored
    (every task failed before one): on the tracks others have on that suite, else hardened."""
    boards = list(store.boards())
    have = {(entry, suite) for entry, suite, _ in boards}
    for run in store.runs():
        if (run.entry, run.suite) not in have:
            have.add((run.entry, run.suite))
            tracks = sorted({t for _, s, t in boards if s == run.suite}) or ["hardened"]
            boards += [(run.entry, run.suite, t) for t in tracks]
    return boards


def standing(store: ResultsStore, entry: str, suite: str, track: str) -> Standing:
    """One entry's board on one suite and track, also when nothing of it was stored (every task
    failed before a verdict): its rows then say why, from the entry's runs."""
    tasks = store.suite_tasks(suite)
    rows = store.evaluations(entry=entry, suite=suite, track=track)
    stored_runs = store.runs(entry=entry, suite=suite)
    runs = [RunCost(r.task, r.cost_usd, r.tokens, r.minutes) for r in stored_runs if r.status in ("done", "failed")]
    names = [name for name, _ in tasks]
    metrics = summarize([outcome(r) for r in rows], names, runs)
    per_run = {r.task: (r.status, r.summary) for r in stored_runs}
    return Standing(entry, suite, track, metrics, dict(tasks), tuple(task_rows(names, metrics.per_task, per_run)))


def sort_key(s: Standing) -> tuple:
    """Per (suite, track): most tasks faster than eager, then most correct, then the all-task geomean."""
    m = s.metrics
    return (s.suite, s.track, -m.fast_p.get(1.0, 0.0), -m.correctness_rate, -(m.geomean_speedup_all or 0.0),
            s.entry)
