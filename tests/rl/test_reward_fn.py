"""The reward service as TRL's reward function: templates, chat completions, groups, metrics."""

from __future__ import annotations

import asyncio
import json

import pytest
from agentforge.evaluator.result import EvalJob, Flag, Status
from agentforge.rl.reward_fn import ServiceReward, batch_metrics, completion_text
from agentforge.rl.rewards import RewardConfig, build_rewarder
from agentforge.rl.service import RewardService


def test_completion_text_reads_plain_and_chat_completions():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "```python\nclass ModelNew: ...```"}]).startswith("```")


def test_reward_function_groups_logs_and_reports(tmp_path, make_result):
    def evaluate(job: EvalJob):
        if "flagged" in job.candidate_source:
            return make_result(Status.INTEGRITY_FLAG, flags=(Flag("side_stream", "stream 7"),))
        return make_result(candidate_us=50.0 if "fast" in job.candidate_source else 100.0)

    service = RewardService(build_rewarder(RewardConfig(shaper="log_speedup")), evaluate_fn=evaluate,
                            job_factory=lambda req, code: EvalJob(req.task_name, req.task_source, code))
    reward = ServiceReward(service, num_generations=2, log_path=tmp_path / "rewards.jsonl")
    template = "```python\n# {completion}\nclass ModelNew: ...\n```"
    metrics: dict[str, float] = {}
    completions = ["fast", "slow", "flagged", "no code"]
    rewards = asyncio.run(reward(
        prompts=["p"] * 4, completions=completions, task_name=["t"] * 4, task_source=["# t"] * 4,
        template=[template, template, template, None], log_metric=metrics.__setitem__,
    ))
    # Group 1: ln 2 vs 0 -> z = +1, -1. Group 2: flagged (-1) vs no code (-1) -> zeros.
    assert rewards == pytest.approx([1.0, -1.0, 0.0, 0.0])
    assert metrics["rl/acceptance_rate"] == 0.5 and metrics["rl/integrity_flag_rate"] == 0.25
    assert metrics["rl/no_code_rate"] == 0.25 and metrics["rl/groups_with_signal"] == 0.5
    assert metrics["rl/speedup_max"] == pytest.approx(2.0)
    assert metrics["rl/reward_speed"] == pytest.approx(0.6931 / 4, abs=1e-3)
    lines = [json.loads(line) for line in (tmp_path / "rewards.jsonl").read_text().splitlines()]
    assert [r["status"] for r in lines] == ["ok", "ok", "integrity_flag", "no_code"]
    assert lines[0]["advantage"] == pytest.approx(1.0) and lines[0]["meta"]["completion"] == "fast"


def test_batch_metrics_of_an_empty_batch_do_not_divide_by_zero():
    assert batch_metrics([], 4)["rl/acceptance_rate"] == 0.0
