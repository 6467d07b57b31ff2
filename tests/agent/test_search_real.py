"""The parallel search end to end on the CPU backend: the real `openai` SDK over HTTP to the
scripted loopback server, the real graph and checkpointer, the real sandboxed evaluator (g++,
build and correctness in child processes, timing one candidate at a time)."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agentforge.evaluator.result import TimingConfig

from agentforge.agent.run import _sandboxed_evaluate, optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings

QUICK = TimingConfig(max_reps=40, time_cap_s=1.0)
_ROUND = re.compile(r"^Round: (\d+)", re.M)
_SLOT = re.compile(r"Candidate: (\d+) of")


def _settings(tmp_path: Path, name: str, base_url: str, max_rounds: int) -> Settings:
    settings = Settings(runs_dir=str(tmp_path / name / "runs"), cache_dir=str(tmp_path / name / "cache"),
                        results_url=f"sqlite:///{tmp_path / 'none.db'}")
    settings.provider.name, settings.provider.base_url = "openai", base_url
    settings.provider.api_key, settings.provider.model = "dummy", "gpt-4.1"
    settings.eval.backend, settings.eval.profile = "cpu", False
    settings.sandbox.isolation = "none"  # the loop is under test, not the isolation (tests/sandbox)
    settings.sandbox.warm_spares = 0  # both sides start every child cold
    settings.agent.max_rounds = max_rounds
    return settings


# Builds and runs, and computes x where the reference computes relu(x): a mismatch.
WRONG_BODY = 'extern "C" void relu(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i]; }'

# Every coder reply takes this long, a stand-in for a model's reply time (hosted models take longer
# for a whole kernel module): a round is its model calls as well as its evaluations.
REPLY_S = 4.0


def _script(scripted: Any, replies: dict[tuple[str, int, int], str]) -> Any:
    lock = threading.Lock()
    served: list[tuple[str, int, int]] = []
    arrived: list[float] = []

    def script(api: str, body: dict[str, Any]) -> Any:
        messages = body.get("messages", [])
        system = "".join(m["content"] for m in messages if m["role"] == "system")
        user = "".join(m["content"] for m in messages if m["role"] == "user")
        slot = _SLOT.search(user)
        key = ("judge" if "You are the judge" in system else "coder", int(_ROUND.search(user).group(1)),
               int(slot.group(1)) if slot else 1)
        with lock:
            served.append(key)
            arrived.append(time.monotonic())
        return scripted.Reply(replies.get(key, "No code."), delay_s=REPLY_S if key[0] == "coder" else 0.0)

    script.served, script.arrived = served, arrived  # type: ignore[attr-defined]
    return script


def _sandboxed(settings: Settings) -> dict[str, Any]:
    """The run's own sandboxed evaluator and check, as `optimize` builds them, given explicitly so
    the run skips the task's preflight (a task tested elsewhere) and the test stays short."""
    return {"evaluate": _sandboxed_evaluate(settings, "cpu", ("eager",), QUICK, ()),
            "check": _sandboxed_evaluate(settings, "cpu", (), None, (), timed=False)}


def _first_round_s(run_dir: str) -> float:
    """Wall time from the run's setup to the close of its first round (events.jsonl)."""
    events = [json.loads(line) for line in (Path(run_dir) / "events.jsonl").read_text().splitlines()]
    start = next(e["t"] for e in events if e["stage"] == "setup")
    return next(e["t"] for e in events if e["stage"] == "keep_best") - start


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_four_candidates_find_the_fast_kernel_a_round_earlier_at_sublinear_cost(
        tmp_path, relu_task, scripted, kernels):
    k = kernels
    # One candidate per round: the simplest kernel first (the vectorised one would come only in a
    # later round, after a verdict).
    one = _script(scripted, {("coder", 1, 1): k.fenced(k.SLOW)})
    # Four proposals from different strategies, as a model's often go: one computes the wrong
    # thing, one does not build, one is the vectorised kernel, one crashes.
    four = _script(scripted, {
        ("coder", 1, 1): k.fenced(k.kernel("relu_wrong", body=WRONG_BODY)), ("coder", 1, 2): k.fenced(k.BROKEN),
        ("coder", 1, 3): k.fenced(k.FAST), ("coder", 1, 4): k.fenced(k.CRASH),
    })
    with scripted.ScriptedServer(one) as server:
        settings = _settings(tmp_path, "n1", server.openai_base_url, 1)
        single = optimize(str(relu_task), settings, **_sandboxed(settings))
    with scripted.ScriptedServer(four) as server:
        settings = _settings(tmp_path, "n4", server.openai_base_url, 1)
        search = optimize(str(relu_task), settings, spec=RunSpec(candidates=4, beam=2), **_sandboxed(settings))

    # After one round, N=4 has the vectorised kernel and N=1 the scalar one.
    assert [r["status"] for r in single.history] == ["ok"]
    by_node = {r["node"]: r for r in search.history}
    statuses = [by_node[n]["status"] for n in ("r1c1", "r1c2", "r1c3", "r1c4")]
    assert statuses == ["mismatch", "compile_error", "ok", "crash"]
    assert search.best["code_hash"] == by_node["r1c3"]["code_hash"]
    # Measured, not scripted: the vectorised kernel beats the -O0 loop the single candidate found.
    assert search.best["speedup"] > 1.5 * single.best["speedup"]
    assert sorted(four.served) == [("coder", 1, i) for i in range(1, 5)]  # one call per candidate
    assert max(four.arrived) - min(four.arrived) < REPLY_S  # all four asked before the first answer
    assert search.usage["calls"] == 4 and search.usage["evaluations"] == 5  # 4 checks + 1 timed
    report = Path(search.outputs["report"]).read_text()
    assert "r1c3" in report and "new best" in report

    # The round's wall time grows sublinearly: four candidates cost less than three single rounds.
    # (Candidates that pass their checks are timed one after another, so a round in which all N
    # pass costs N timed evaluations: that part is linear by design.)
    t1, t4 = _first_round_s(single.run_dir), _first_round_s(search.run_dir)
    report_line = next(line for line in report.splitlines() if line.startswith("- round 1"))
    print(f"first round: N=1 {t1:.1f} s, N=4 {t4:.1f} s, ratio {t4 / t1:.2f}; {report_line}")
    assert t4 < 3 * t1, (t1, t4)
