"""The parallel search's logic, with the real graph and SQLite checkpointer and a provider keyed
by (role, round, candidate); evaluation by figures written into each fake kernel (no compiler),
and the concurrent check / serial timing stages with instrumented stand-ins."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentforge.agent.batch_eval import TimingGate, evaluate_batch
from agentforge.agent.beam import allocate
from agentforge.agent.run import optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings

_ROUND = re.compile(r"^Round: (\d+)", re.M)
_SLOT = re.compile(r"Candidate: (\d+) of (\d+)")


class KeyedProvider:
    """Replies by (role, round, candidate) whatever order the concurrent calls arrive in."""

    name = "fake"

    def __init__(self, replies: dict[tuple[str, int, int], str], default_judge: str):
        self.replies, self.default_judge = replies, default_judge
        self.calls: list[tuple[str, int, int, float | None]] = []
        self.prompts: dict[tuple[str, int, int], str] = {}
        self.lock = threading.Lock()
        self.crash_on: tuple[str, int] | None = None  # the process "dies" at this call, once

    def complete(self, messages: Any, *, model: Any = None, role: str = "coder", max_tokens: Any = None,
                 temperature: Any = None) -> Any:
        from agentforge.llm.base import Completion, Usage

        user = messages[-1].content
        rnd = int(_ROUND.search(user).group(1))
        slot = _SLOT.search(user)
        key = (role, rnd, int(slot.group(1)) if slot else 0)
        if self.crash_on == key[:2]:
            self.crash_on = None
            raise KeyboardInterrupt("killed in the middle of the judge step")
        with self.lock:
            self.calls.append((*key, temperature))
            self.prompts[key] = "\n".join(m.content for m in messages)
        text = self.replies.get(key, self.default_judge if role == "judge" else "no code")
        return Completion(text=text, model="fake-model", usage=Usage(100, 50, 0.001))


def _settings(tmp_path: Path, **agent: Any) -> Settings:
    settings = Settings(runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"),
                        results_url=f"sqlite:///{tmp_path / 'none.db'}")
    settings.eval.backend = "cpu"
    for key, value in agent.items():
        setattr(settings.agent, key, value)
    return settings


def _checkpointed(settings: Settings, run_id: str) -> Any:
    """The run's last checkpoint, read through LangGraph's own SQLite saver."""
    import sqlite3
    from types import SimpleNamespace

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(Path(settings.runs_dir) / run_id / "checkpoints.sqlite"))
    try:
        values = SqliteSaver(conn).get({"configurable": {"thread_id": run_id}})["channel_values"]
    finally:
        conn.close()
    return SimpleNamespace(rounds=values["round"], history=values["history"], best=values["best"],
                           usage=values["usage"])


def test_allocation_shares_proposals_best_first():
    beam = [{"node": "a"}, {"node": "b"}]
    assert allocate(4, beam) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert allocate(3, beam) == [(0, 0), (1, 0), (0, 1)]
    assert allocate(1, beam) == [(0, 0)]
    assert allocate(3, [{"node": None}]) == [(0, 0), (0, 1), (0, 2)]


def test_beam_search_tree_budget_and_resume(tmp_path, relu_task, kernels):
    k = kernels.fake_kernel
    provider = KeyedProvider({
        ("coder", 1, 1): kernels.fenced(k("a", us=50)),
        ("coder", 1, 2): kernels.fenced(k("b", status="compile_error")),
        ("coder", 1, 3): kernels.fenced(k("c", us=20)),
        ("coder", 1, 4): kernels.fenced(k("d", us=40)),
        # Round 2: c (the best) gets candidates 1 and 3, d (second) gets 2 and 4.
        ("coder", 2, 1): kernels.fenced(k("c1", us=10)),
        ("coder", 2, 2): kernels.fenced(k("d1", us=30)),
        ("coder", 2, 3): kernels.fenced(k("c", us=20)),  # c again, unchanged: a duplicate
        ("coder", 2, 4): "only prose",
    }, default_judge=kernels.optimise_verdict("unroll"))
    settings = _settings(tmp_path, max_rounds=2)
    provider.crash_on = ("judge", 1)
    with pytest.raises(KeyboardInterrupt):
        optimize(str(relu_task), settings, RunSpec(candidates=4, beam=2), provider=provider,
                 evaluate=kernels.fake_evaluate, run_id="search")
    first = _checkpointed(settings, "search")
    assert [r["node"] for r in first.history] == ["r1c1", "r1c2", "r1c3", "r1c4"]
    assert [r["status"] for r in first.history] == ["ok", "compile_error", "ok", "ok"]
    assert first.best["speedup"] == pytest.approx(5.0)  # eager 100 us / c's 20 us
    outcomes = {r["node"]: r["outcome"] for r in first.history}
    assert outcomes["r1c3"] == "new best" and outcomes["r1c4"] == "in the beam"
    assert outcomes["r1c1"].startswith("not kept")
    assert first.usage["calls"] == 4 and first.usage["evaluations"] == 4
    # Different strategies and temperatures per candidate.
    temps = sorted(t for role, _, _, t in provider.calls if role == "coder")
    assert temps == [0.2, 0.6, 0.9, 1.0]
    assert "apply the recommendation" not in provider.prompts[("coder", 1, 1)]
    assert "Strategy: the simplest correct kernel" in provider.prompts[("coder", 1, 1)]

    # Resume from the checkpoint: round 1 is not redone, and the beam (c, d) is judged and refined.
    before = len(provider.calls)
    second = optimize(None, settings, resume="search", provider=provider, evaluate=kernels.fake_evaluate)
    assert second.rounds == 2
    assert sum(1 for c in provider.calls if c[:2] == ("coder", 1)) == 4  # not asked again
    judged = sorted(n for role, n, _, _ in provider.calls[before:] if role == "judge")
    assert judged == [1, 1]  # the cut-off step again: one verdict per beam entry (c and d), at once
    round2 = {r["node"]: r for r in second.history if r["round"] == 2}
    assert {n: r["parent"] for n, r in round2.items()} == {"r2c1": "r1c3", "r2c2": "r1c4", "r2c3": "r1c3",
                                                          "r2c4": "r1c4"}
    assert round2["r2c1"]["outcome"] == "new best" and second.best["speedup"] == pytest.approx(10.0)
    assert round2["r2c3"]["status"] == "duplicate" and round2["r2c4"]["status"] == "no_code"
    assert "Strategy: apply the judge's recommendation as written" in provider.prompts[("coder", 2, 1)]
    assert "unroll" in provider.prompts[("coder", 2, 2)]  # the beam entry's own verdict reached it
    # Every call and evaluation counted: 8 coder + 2 judge calls, 4 + 2 evaluations.
    assert second.usage["calls"] == 10 and second.usage["evaluations"] == 6
    assert second.usage["cost_usd"] == pytest.approx(0.010)
    report = Path(second.outputs["report"]).read_text()
    assert "## Search tree" in report and "from r1c3" in report and "r2c1 (" in report
    assert "4 candidates per round, a beam of 2" in report


def test_failures_are_carried_for_repair_and_knowledge_switches_off(tmp_path, relu_task, kernels):
    k = kernels.fake_kernel
    provider = KeyedProvider({
        ("coder", 1, 1): kernels.fenced(k("x", status="compile_error")),
        ("coder", 1, 2): kernels.fenced(k("y", status="compile_error")),
        ("coder", 2, 1): kernels.fenced(k("x2", us=25)),
    }, default_judge=kernels.repair_verdict("missing semicolon"))
    summary = optimize(str(relu_task), _settings(tmp_path, max_rounds=2), provider=provider,
                       evaluate=kernels.fake_evaluate,
                       spec=RunSpec(candidates=2, beam=2, skills=False, exemplars=False))
    round2 = [r for r in summary.history if r["round"] == 2]
    assert {r["parent"] for r in round2} == {"r1c1", "r1c2"}  # each failure repaired by its own line
    assert {r["mode"] for r in round2} == {"repair"}
    assert "missing semicolon" in provider.prompts[("coder", 2, 1)]
    assert summary.best["round"] == 2
    assert "Technique notes" not in provider.prompts[("coder", 1, 1)]
    report = Path(summary.outputs["report"]).read_text()
    assert "switched off (--no-skills)" in report and "switched off (--no-exemplars)" in report


def test_checks_run_at_once_and_timings_alone(relu_task, kernels):
    """Stage 1 overlaps its checks; no timing overlaps a check or another timing."""
    from agentforge.candidate import Candidate

    intervals: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def stage(kind: str, seconds: float):
        def run(task: Any, candidate: Candidate) -> Any:
            start = time.monotonic()
            time.sleep(seconds)
            with lock:
                intervals.append((kind, start, time.monotonic()))
            return kernels.fake_evaluate(task, candidate)
        return run

    task = type("T", (), {"name": "relu"})()
    cands = [Candidate(kernels.fake_kernel(t, us=10), "cpu") for t in "abcd"]
    cands[1] = Candidate(kernels.fake_kernel("b", status="compile_error"), "cpu")
    gate = TimingGate()
    results = evaluate_batch(task, cands, stage("time", 0.05), device="cpu", check=stage("check", 0.2),
                             workers=4, gate=gate)
    assert [r.status.value for r in results] == ["ok", "compile_error", "ok", "ok"]
    checks = [(a, b) for kind, a, b in intervals if kind == "check"]
    timings = [(a, b) for kind, a, b in intervals if kind == "time"]
    assert len(checks) == 4 and len(timings) == 3  # a failed check is not timed
    assert max(a for a, _ in checks) < min(b for _, b in checks)  # all four checks overlapped
    for (_, b1), (a2, _) in zip(sorted(timings), sorted(timings)[1:], strict=False):
        assert b1 <= a2
    for a, b in timings:
        assert all(b2 <= a or a2 >= b for a2, b2 in checks)

    # Two runs sharing the gate: one run's checks and timings wait for the other's timing.
    intervals.clear()

    def other_run() -> None:
        evaluate_batch(task, [cands[0]], stage("time", 0.3), device="cpu", gate=gate)

    thread = threading.Thread(target=other_run)
    thread.start()
    time.sleep(0.05)
    evaluate_batch(task, cands[2:], stage("time", 0.01), device="cpu", check=stage("check", 0.01), gate=gate)
    thread.join()
    long_start, long_end = next((a, b) for _, a, b in intervals if b - a >= 0.3)
    others = [(a, b) for _, a, b in intervals if (a, b) != (long_start, long_end)]
    assert len(others) == 4  # two checks and two timings of the second run
    assert all(b <= long_start or a >= long_end for a, b in others)


def test_the_library_provider_searches_one_candidate_per_round(tmp_path, relu_task, kernels):
    """It proposes the next untried shipped variant per call: N calls at once would repeat one."""
    import json

    provider = kernels.FakeProvider([kernels.fenced(kernels.fake_kernel("v1", us=30))])
    provider.name = "library"
    summary = optimize(str(relu_task), _settings(tmp_path, max_rounds=1), provider=provider,
                       evaluate=kernels.fake_evaluate, spec=RunSpec(candidates=4, beam=2))
    meta = json.loads((Path(summary.run_dir) / "run.json").read_text())
    assert meta["search"] == {"candidates": 1, "beam": 1}
    assert len(summary.history) == 1 and "node" not in summary.history[0]
    assert "--candidates was 1" in summary.notice
