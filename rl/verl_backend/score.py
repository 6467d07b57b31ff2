"""verl's custom score function: `compute_score(data_source, solution_str, ground_truth,
extra_info, **reward_kwargs)`, asynchronous, scoring each rollout as it finishes.

Point verl at this file and pass the reward settings as `reward_kwargs`:

    reward.custom_reward_function.path=<repo>/rl/verl_backend/score.py
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.config_path=<repo>/rl/configs/verl-reward.toml

`ground_truth` is the task name, `extra_info` carries `task_source` (and optionally `template`
and `reference_speedup`), as `dataset.py` writes them. One RewardService per process and config
file serves every call, so its cache, concurrency limit and timeouts apply across a batch.
With `reward_kwargs.server_url=http://HOST:PORT` instead of `config_path`, every reward worker
sends its completions to one reward server (`agentforge rl serve-rewards`), which then holds the
one cache and concurrency limit for all of them.
verl normalises scores per group itself (algorithm.adv_estimator=grpo); the score returned here
is the shaped reward, and the dict's other keys land in verl's reward_extra_info metrics.
"""

from __future__ import annotations

import threading
from typing import Any

from agentforge.rl.records import RewardRecord
from agentforge.rl.reward_client import RewardClient
from agentforge.rl.reward_fn import COMPLETION_MARK
from agentforge.rl.service import RewardRequest, RewardService

_SERVICES: dict[str, RewardService] = {}
_CLIENTS: dict[str, RewardClient] = {}
_LOCK = threading.Lock()


def service_for(config_path: str) -> RewardService:
    """The process's RewardService for a run configuration (created on first use)."""
    with _LOCK:
        service = _SERVICES.get(config_path)
        if service is None:
            from agentforge.rl.config import load_config
            from agentforge.rl.rewards import build_rewarder

            config = load_config(config_path)
            service = _SERVICES[config_path] = RewardService(build_rewarder(config.reward), config.service)
        return service


def client_for(server_url: str) -> RewardClient:
    """The process's client of a reward server (created on first use)."""
    with _LOCK:
        client = _CLIENTS.get(server_url)
        if client is None:
            client = _CLIENTS[server_url] = RewardClient(server_url)
        return client


async def compute_score(data_source: str, solution_str: str, ground_truth: str,
                        extra_info: dict[str, Any] | None = None, config_path: str | None = None,
                        server_url: str | None = None, **_: Any) -> dict[str, Any]:
    if server_url:
        scorer: RewardService | RewardClient = client_for(server_url)
    elif config_path:
        scorer = service_for(config_path)
    else:
        raise ValueError("set reward.custom_reward_function.reward_kwargs.config_path to an rl config (TOML), "
                         "or reward_kwargs.server_url to a reward server (agentforge rl serve-rewards)")
    return await score_with(scorer, solution_str, ground_truth, extra_info or {})


async def score_with(service: RewardService | RewardClient, solution_str: str, task_name: str,
                     extra_info: dict[str, Any]) -> dict[str, Any]:
    template = extra_info.get("template")
    reply = template.replace(COMPLETION_MARK, solution_str) if template else solution_str
    ref = extra_info.get("reference_speedup")
    request = RewardRequest(task_name=task_name, task_source=extra_info["task_source"], completion=reply,
                            reference_speedup=float(ref) if ref else None,
                            meta={"index": extra_info.get("index")})
    return as_verl(await service.score_one(request))


def as_verl(record: RewardRecord) -> dict[str, Any]:
    """verl's result dict: `score`, plus numeric extras it aggregates into metrics."""
    return {
        "score": record.reward,
        "accepted": float(record.accepted),
        "integrity_flagged": float(record.flagged),
        "compiled": float(record.status not in ("compile_error", "no_code")),
        "speedup": record.speedup or 0.0,
        "cached": float(record.cached),
    }
