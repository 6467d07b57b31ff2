"""The verl score function runs in the default install without verl, over the same service."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from agentforge.evaluator.result import EvalJob
from agentforge.rl.config import load_config
from agentforge.rl.rewards import build_rewarder
from agentforge.rl.service import RewardService, ServiceConfig
from agentforge.rl.verl_backend import dataset, score

CONFIGS = Path(__file__).resolve().parents[2] / "rl" / "configs"


def test_the_score_module_never_imports_verl():
    code = ("import sys, agentforge.rl.verl_backend.score, agentforge.rl.verl_backend.dataset; "
            "assert 'verl' not in sys.modules and 'trl' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_score_with_places_the_completion_and_returns_verl_metrics(make_result):
    seen = []

    def evaluate(job: EvalJob):
        seen.append(job.candidate_source)
        return make_result(candidate_us=50.0)

    service = RewardService(build_rewarder(), ServiceConfig(), evaluate_fn=evaluate,
                            job_factory=lambda req, code: EvalJob(req.task_name, req.task_source, code))
    extra = {"task_source": "# task", "template": "```python\nclass ModelNew:\n    {completion}\n```"}
    out = asyncio.run(score.score_with(service, "x = 1", "level1/relu", extra))
    assert out["score"] == 2.0 and out["accepted"] == 1.0 and out["speedup"] == 2.0
    assert "    x = 1" in seen[0]
    no_code = asyncio.run(score.score_with(service, "no code here", "level1/relu", {"task_source": "# t"}))
    assert no_code["score"] == -1.0 and no_code["compiled"] == 0.0


def test_verl_rows_and_shipped_configs():
    rows = dataset.verl_rows([{"prompt": "p", "task_name": "level1/relu", "task_source": "s"}], "train")
    assert rows[0]["reward_model"]["ground_truth"] == "level1/relu"
    assert rows[0]["prompt"] == [{"role": "user", "content": "p"}]
    assert rows[0]["extra_info"]["task_source"] == "s"
    reward = load_config(CONFIGS / "verl-reward.toml")
    assert reward.service.executor == "ray"
    text = (CONFIGS / "verl-cluster.yaml").read_text()
    assert "rl/verl_backend/score.py" in text and "verl-reward.toml" in text


def test_the_shipped_recipe_keeps_evaluation_off_training_gpus():
    from agentforge.rl.verl_backend.preflight import problems

    service = load_config(CONFIGS / "verl-reward.toml").service
    assert service.ray_num_gpus == 0 and service.ray_resources == {"agentforge_eval_gpu": 1.0}
    assert "--resources='{\"agentforge_eval_gpu\": 8}'" in (CONFIGS / "verl-cluster.yaml").read_text()
    script = (CONFIGS.parent / "verl_backend" / "run_cluster.sh").read_text()
    assert "agentforge.rl.verl_backend.preflight" in script and "--training-gpus" in script
    # A cluster of training nodes only: the run would time out every reward; preflight says so.
    training_only = {"CPU": 256.0, "GPU": 32.0}
    [missing] = problems(service, training_only, training_gpus=32)
    assert "agentforge_eval_gpu" in missing and "--num-gpus=0" in missing
    assert problems(service, {**training_only, "agentforge_eval_gpu": 8.0}, training_gpus=32) == []
