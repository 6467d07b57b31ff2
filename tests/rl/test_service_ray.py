"""The reward service on Ray workers: a local one-node cluster, real evaluations there."""

from __future__ import annotations

import pytest
from agentforge.rl.rewards import build_rewarder
from agentforge.rl.service import RayEvaluate, RewardRequest, RewardService, ServiceConfig
from agentforge.rl.tiny import smoke_task, smoke_template

ray = pytest.importorskip("ray")


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow  # starting Ray and two sandbox children on Ray workers: about 40 s on 2 cores
def test_rewards_from_evaluations_on_ray_workers(local_ray, build_cache_dir):
    name, source = smoke_task()
    config = ServiceConfig(executor="ray", concurrency=2, request_timeout_s=240,
                           job_options={"shapes": ["default"], "measure": {"baselines": ["eager"]},
                                        "timing": {"min_reps": 5, "max_reps": 20, "time_cap_s": 1.0}},
                           sandbox_options={"cache_dir": build_cache_dir})
    service = RewardService(build_rewarder(), config)
    assert isinstance(service._evaluate, RayEvaluate)
    replies = [smoke_template().replace("{completion}", body) for body in ("v=v>0.0f?v:0.0f;", "v=-v;")]
    good, wrong = service.score_sync([RewardRequest(name, source, reply) for reply in replies])
    assert good.accepted and good.reward >= 1.0 and good.provenance["device_kind"] == "cpu"
    assert wrong.status == "mismatch" and wrong.reward == -1.0
