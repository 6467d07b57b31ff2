"""Standings: the metrics of every (entry, suite, track) in the results store, ranked."""

from __future__ import annotations

from dataclasses import dataclass

from agentforge.leaderboard.metrics import EntryMetrics, RunCost, SampleOutcome, overhead_flags, summarize
from agentforge.store import ResultsStore, StoredEvaluation


@dataclass(frozen=True)
class Standing:
    entry: str
    suite: str
    track: str
    metrics: EntryMetrics
    levels: dict[str, int | None]  # task -> level, for per-level views


def outcome(row: StoredEvaluation) -> SampleOutcome:
    return SampleOutcome(
        task=row.task, accepted=row.accepted, speedup=row.speedup, speedup_vs_compile=row.speedup_vs_compile,
        sol_fraction=row.sol_fraction, flagged=row.n_flags > 0, sample=row.sample, status=row.status,
        **overhead_flags(row.result_json),
    )


def standings(store: ResultsStore, *, suite: str | None = None, track: str | None = None) -> list[Standing]:
    """Every board in the store (filtered), ranked by sort_key."""
    found = []
    for entry, board_suite, board_track in store.boards():
        if (suite is not None and board_suite != suite) or (track is not None and board_track != track):
            continue
        tasks = store.suite_tasks(board_suite)
        rows = store.evaluations(entry=entry, suite=board_suite, track=board_track)
        runs = [RunCost(r.task, r.cost_usd, r.tokens, r.minutes)
                for r in store.runs(entry=entry, suite=board_suite) if r.status in ("done", "failed")]
        metrics = summarize([outcome(r) for r in rows], [name for name, _ in tasks], runs)
        found.append(Standing(entry, board_suite, board_track, metrics, dict(tasks)))
    return sorted(found, key=sort_key)


def sort_key(s: Standing) -> tuple:
    """Per (suite, track): most tasks faster than eager, then most correct, then the all-task geomean."""
    m = s.metrics
    return (s.suite, s.track, -m.fast_p.get(1.0, 0.0), -m.correctness_rate, -(m.geomean_speedup_all or 0.0),
            s.entry)
