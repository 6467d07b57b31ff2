"""The whole loop on the CPU backend: the real graph and SQLite checkpointer, the real `openai`
and `anthropic` SDKs over HTTP to a scripted loopback server, the real sandboxed evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentforge.evaluator.result import TimingConfig

from agentforge.agent.artifacts import ArtifactStore
from agentforge.agent.run import optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings

QUICK = TimingConfig(max_reps=40, time_cap_s=1.0)


def _settings(tmp_path: Path, provider: str, base_url: str, **agent: object) -> Settings:
    settings = Settings(runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"))
    settings.provider.name = provider
    settings.provider.base_url = base_url
    settings.provider.api_key = "dummy"
    settings.provider.model = "gpt-4.1" if provider == "openai" else "claude-sonnet-4-6"
    settings.provider.max_retries = 3
    # A server by base URL is billed from a configured price table only: the scripted server stands
    # in for the hosted API here, so its prices are configured as a gateway's would be.
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."gpt-4.1"]\ninput = 2.0\noutput = 8.0\n'
                      '[models."claude-sonnet-4-6"]\ninput = 3.0\noutput = 15.0\n')
    settings.provider.price_table = str(prices)
    settings.eval.backend = "cpu"
    settings.eval.profile = False
    # The loop is under test here, not the sandbox's isolation (tested in tests/sandbox): the child
    # runs as this user, so it can read pytest's private tmp folders that hold the build cache.
    settings.sandbox.isolation = "none"
    for key, value in agent.items():
        setattr(settings.agent, key, value)
    return settings


def test_compile_error_repair_optimise_no_code_429_and_crash(
        tmp_path, relu_task, scripted, kernels, round_script):
    script = round_script({
        ("coder", 1): [scripted.Reply(kernels.fenced(kernels.BROKEN, "A first kernel."))],
        ("judge", 1): [scripted.Reply(kernels.repair_verdict("missing semicolon in relu"))],
        ("coder", 2): [scripted.rate_limited(0.01), scripted.Reply(kernels.fenced(kernels.SLOW))],
        ("judge", 2): [scripted.Reply("I think it is slow, but I will not say it in JSON.")],
        ("coder", 3): [scripted.Reply(kernels.fenced(kernels.FAST, "Vectorised at -O3."))],
        ("judge", 3): [scripted.Reply(kernels.optimise_verdict("unroll by 8"))],
        ("coder", 4): [scripted.Reply("I would unroll the loop, but here is only prose.")],
        ("coder", 5): [scripted.Reply(kernels.fenced(kernels.CRASH))],
    })
    with scripted.ScriptedServer(script) as server:
        settings = _settings(tmp_path, "openai", server.openai_base_url, max_rounds=5)
        views: list[dict] = []
        summary = optimize(str(relu_task), settings, spec=RunSpec(baselines=("eager",), timing=QUICK),
                           on_progress=views.append)

    statuses = [r["status"] for r in summary.history]
    assert statuses == ["compile_error", "ok", "ok", "no_code", "crash"], summary.history
    assert summary.stop_reason.startswith("rounds")
    assert summary.rounds == 5 and summary.status == "finished"

    # Keep-best follows the real measurements: the best is the fastest accepted candidate.
    accepted = [r for r in summary.history if r["status"] == "ok"]
    fastest = max(accepted, key=lambda r: r["speedup"])
    assert summary.best["round"] == fastest["round"]
    assert summary.best["speedup"] == pytest.approx(fastest["speedup"])
    assert Path(summary.outputs["best_kernel"]).read_text().strip() == (
        kernels.FAST if fastest["round"] == 3 else kernels.SLOW).strip()

    # Every request went through the real SDK; the 429 was retried by our layer, counted.
    assert [s for _, _, s in script.served].count(429) == 1
    assert summary.usage["retries"] == 1
    assert summary.usage["no_code_replies"] == 1
    assert summary.usage["calls"] == 8  # 5 coder + 3 judge replies that arrived
    assert summary.usage["cost_usd"] > 0

    coder_prompts = {(role, rnd): r.prompt for r, (role, rnd, _) in zip(server.log, script.served, strict=True)
                     if r.status == 200}
    # The repair verdict reached the coder, with the compiler's log.
    assert "missing semicolon in relu" in coder_prompts[("coder", 2)]
    assert "compile_error" in coder_prompts[("coder", 2)]
    # A malformed judge reply gave a fallback verdict, and the loop went on.
    assert "not diagnosed" in coder_prompts[("coder", 3)]
    # The reply without code went back to the coder as a repair.
    assert "no code block" in coder_prompts[("coder", 5)]
    # The crash was reported as a crash, not as a failure of the run.
    assert summary.history[-1]["outcome"] == "failed"

    # Durable artifacts: the report, the plot, and content-addressed objects.
    report = Path(summary.outputs["report"]).read_text()
    assert "| 3 | optimise |" in report and "rounds: 5 of 5" in report
    assert Path(summary.outputs["plot"]).stat().st_size > 1000
    store = ArtifactStore(Path(summary.run_dir) / "objects")
    assert store.get_json(summary.best["candidate_ref"])["provenance"]["prompt_version"]
    assert {v["stage"] for v in views} >= {"coder", "evaluate", "keep_best", "judge", "finish"}
    assert json.loads((Path(summary.run_dir) / "summary.json").read_text())["rounds"] == 5


def _no_code(scripted, rounds: int, **reply) -> dict:
    return {("coder", n): [scripted.Reply("Only prose, no code.", **reply)] for n in range(1, rounds + 1)}


def test_round_budget(tmp_path, relu_task, scripted, round_script):
    with scripted.ScriptedServer(round_script(_no_code(scripted, 5))) as server:
        summary = optimize(str(relu_task), _settings(tmp_path, "openai", server.openai_base_url, max_rounds=2))
    assert summary.stop_reason == "rounds: 2 of 2 done" and summary.rounds == 2
    assert summary.usage["no_code_replies"] == 2 and len(server.log) == 2  # no judge for a no-code reply


def test_cost_budget(tmp_path, relu_task, scripted, round_script):
    # gpt-4.1 at $2 per million input tokens: one such reply costs $2.
    script = round_script(_no_code(scripted, 5, input_tokens=1_000_000, output_tokens=0))
    with scripted.ScriptedServer(script) as server:
        summary = optimize(str(relu_task), _settings(tmp_path, "openai", server.openai_base_url,
                                                     max_cost_usd=1.0))
    assert summary.rounds == 1 and summary.stop_reason.startswith("cost: $2.0000")
    assert summary.usage["cost_usd"] == pytest.approx(2.0)


def test_time_budget(tmp_path, relu_task, scripted, round_script):
    with scripted.ScriptedServer(round_script(_no_code(scripted, 5, delay_s=0.2))) as server:
        summary = optimize(str(relu_task), _settings(tmp_path, "openai", server.openai_base_url,
                                                     max_minutes=0.001))
    assert summary.rounds == 1 and summary.stop_reason.startswith("time:")


def test_plateau_budget_with_a_real_evaluation(tmp_path, relu_task, scripted, kernels, round_script):
    script = round_script({
        ("coder", 1): [scripted.Reply(kernels.fenced(kernels.SLOW))],
        ("judge", 1): [scripted.Reply(kernels.optimise_verdict("vectorise"))],
        ("coder", 2): [scripted.Reply("No code.")],
    })
    with scripted.ScriptedServer(script) as server:
        summary = optimize(str(relu_task), _settings(tmp_path, "openai", server.openai_base_url,
                                                     plateau_rounds=1),
                           spec=RunSpec(baselines=("eager",), timing=QUICK))
    assert [r["status"] for r in summary.history] == ["ok", "no_code"]
    assert summary.stop_reason == "plateau: no improvement in 1 rounds"
    assert summary.best["round"] == 1 and summary.best["speedup"] > 0


def test_anthropic_path(tmp_path, relu_task, scripted, kernels, round_script):
    script = round_script({
        ("coder", 1): [scripted.server_error(529), scripted.Reply(kernels.fenced(kernels.SLOW))],
        ("judge", 1): [scripted.Reply(kernels.optimise_verdict("build at -O3"))],
        ("coder", 2): [scripted.Reply("No code.")],
    })
    with scripted.ScriptedServer(script) as server:
        settings = _settings(tmp_path, "anthropic", server.root, max_rounds=2)
        settings.provider.judge_model = "claude-haiku-4-5"
        summary = optimize(str(relu_task), settings, spec=RunSpec(baselines=("eager",), timing=QUICK))
    assert {r.api for r in server.log} == {"anthropic"}
    assert [r.model for r in server.log if r.status == 200] == [
        "claude-sonnet-4-6", "claude-haiku-4-5", "claude-sonnet-4-6"]
    assert [r["status"] for r in summary.history] == ["ok", "no_code"]
    assert summary.usage["retries"] == 1 and summary.usage["cost_usd"] > 0
    assert summary.best["round"] == 1
    assert "build at -O3" in server.log[-1].prompt
