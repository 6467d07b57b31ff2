"""`agentforge rl eval`: a checkpoint of a real GRPO run (TRL, the tiny policy, rewards from the
real evaluator on the CPU backend) is served on loopback beside its base policy, their replies
are judged by the real evaluator in sandbox children, stored by the leaderboard's runner and
summarised by its metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentforge.rl.config import config_from_dict, load_config
from typer.testing import CliRunner

from agentforge.cli import app
from agentforge.store import ResultsStore

SMOKE_CONFIG = Path(__file__).resolve().parents[2] / "rl" / "configs" / "cpu-smoke.toml"


def _config(tmp_path: Path, build_cache_dir: str):
    smoke = load_config(SMOKE_CONFIG)
    service = {**vars(smoke.service), "sandbox_options": {"cache_dir": build_cache_dir}}
    return config_from_dict({
        "name": "eval-test", "model": {"tiny": True, "seed": 0}, "data": {"source": "smoke", "repeat": 4},
        "reward": {"shaper": "milestones"}, "service": service,
        "grpo": {**smoke.grpo, "max_steps": 1, "save_steps": 1, "per_device_train_batch_size": 4,
                 "num_generations": 4},
        "output": {"dir": str(tmp_path / "run"), "resume": False, "plot": False},
    })


@pytest.mark.slow  # one real GRPO step and a dozen sandboxed evaluations
def test_the_smoke_runs_final_checkpoint_is_scored_beside_its_base(tmp_path, build_cache_dir):
    from agentforge.rl import evaluate as rl_eval
    from agentforge.rl.trl_train import train_grpo

    config = _config(tmp_path, build_cache_dir)
    outcome = train_grpo(config)
    final = outcome.output_dir / "final"
    assert (final / "config.json").is_file()

    suite, tasks = rl_eval.training_tasks(config)
    assert [t.task.name for t in tasks] == ["smoke/relu"] and tasks[0].template
    base = rl_eval.base_model_dir(config, tmp_path / "eval")
    sampling = rl_eval.Sampling(samples=2, max_tokens=2, temperature=1.0, seed=0, threads=1)
    report = rl_eval.evaluate_checkpoint(final, base=base, suite=suite, tasks=tasks, sampling=sampling,
                                         service=config.service, out_dir=tmp_path / "eval")

    assert [s.label for s in report.scores] == ["checkpoint", "base"]
    for score in report.scores:
        m = score.metrics
        assert sum(score.statuses.values()) == m.n_samples == 2
        assert m.n_tasks == 1 and m.n_evaluated == 1
        # One task: the correctness rate is 1 exactly when some sample was accepted ("ok").
        assert m.correctness_rate == (1.0 if score.statuses.get("ok") else 0.0)
        assert set(score.statuses) <= {"ok", "compile_error", "mismatch", "runtime_error", "integrity_flag"}
        assert score.completion_tokens >= 2  # every sample wrote at least a token
    with ResultsStore(f"sqlite:///{tmp_path / 'eval' / 'results.db'}") as store:
        rows = store.evaluations(suite=suite.name)
    assert len(rows) == 4
    for row in rows:  # each reply went into the task's C++ skeleton: the module always parses
        error = json.loads(row.result_json).get("error") or {}
        assert error.get("type") != "SyntaxError", error
    written = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert [m["label"] for m in written["models"]] == ["checkpoint", "base"]
    assert written["models"][0]["metrics"]["correct"] == report.scores[0].metrics.correctness_rate


def test_a_reply_becomes_the_candidate_the_reward_service_would_judge():
    from agentforge.rl import evaluate as rl_eval
    from agentforge.rl.config import RLConfig

    from agentforge.candidate import extract_code

    _, [task] = rl_eval.training_tasks(RLConfig(name="t"))
    source = rl_eval.candidate_source("v=v>0.0f?v:0.0f;", task)
    assert source == extract_code(task.template.replace("{completion}", "v=v>0.0f?v:0.0f;"))
    assert "class ModelNew" in source and "v=v>0.0f?v:0.0f;" in source and "```" not in source
    plain = rl_eval.suite_tasks("tasks:level1", "cpu")[1][0]
    reply = "Here it is:\n```python\nclass ModelNew:\n    pass\n```\n"
    assert rl_eval.candidate_source(reply, plain) == "class ModelNew:\n    pass\n"
    assert rl_eval.candidate_source("no code at all", plain) == "no code at all"


def test_the_command_refuses_what_it_cannot_score(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["rl", "eval", str(tmp_path)])
    assert missing.exit_code == 2 and "--config" in missing.output
    not_a_model = runner.invoke(app, ["rl", "eval", str(tmp_path), "--suite", "level1", "--no-base",
                                      "--out", str(tmp_path / "out")])
    assert not_a_model.exit_code == 2 and "config.json" in not_a_model.output
    bad_suite = runner.invoke(app, ["rl", "eval", str(tmp_path), "--suite", "nonsense", "--no-base"])
    assert bad_suite.exit_code == 2 and "unknown suite" in bad_suite.output
