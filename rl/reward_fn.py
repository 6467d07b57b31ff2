"""The reward service as a trainer's reward function (TRL's signature; verl wraps it too).

TRL calls `await reward(prompts=..., completions=..., **dataset_columns, log_metric=...)` once
per generation batch. Each row's columns say which task it is (`task_name`, `task_source`) and,
optionally, a `template` the completion is placed into at `{completion}` (the CPU smoke run's
tiny policy writes only a kernel's loop body), and the shipped reference kernel's recorded
speedup (`reference_speedup`, with `reference_record` naming the record it came from). The
reward of each completion comes from the service; group z-scoring with clipping is applied
here when `group_clip` is set, with groups of `num_generations` consecutive completions (TRL's
layout on one process). Every record is appended to a JSONL log, and batch metrics go to the
trainer's log through `log_metric`.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentforge.rl.grouping import group_zscore
from agentforge.rl.records import NO_CODE, RewardRecord
from agentforge.rl.service import RewardRequest, RewardService

COMPLETION_MARK = "{completion}"


class ServiceReward:
    """An async, picklable-by-config reward function over a `RewardService`."""

    __name__ = "evaluator_reward"

    def __init__(self, service: RewardService, num_generations: int, group_clip: float | None = 1.5,
                 normalize: bool = True, log_path: str | Path | None = None) -> None:
        self.service = service
        self.num_generations = num_generations
        self.group_clip = group_clip
        self.normalize = normalize
        self.log_path = Path(log_path) if log_path else None
        self._lock = threading.Lock()
        self.calls = 0

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
        log_metric: Callable[[str, float], None] | None = columns.pop("log_metric", None)
        state = columns.pop("trainer_state", None)
        step = getattr(state, "global_step", self.calls)
        requests = [self.request(i, completion, columns, step) for i, completion in enumerate(completions)]
        records = await self.service.score(requests)
        rewards = [r.reward for r in records]
        if self.normalize:
            groups = [i // self.num_generations for i in range(len(rewards))]
            rewards = group_zscore(rewards, groups, clip=self.group_clip)
        self._log(records, rewards, step)
        if log_metric is not None:
            for name, value in batch_metrics(records, self.num_generations).items():
                log_metric(name, value)
        self.calls += 1
        return rewards

    def request(self, i: int, completion: Any, columns: dict[str, Any], step: int) -> RewardRequest:
        text = completion_text(completion)
        template = _column(columns, "template", i)
        reply = template.replace(COMPLETION_MARK, text) if template else text
        ref = _column(columns, "reference_speedup", i)
        meta = {"step": step, "index": i, "group": i // self.num_generations, "completion": text}
        if ref and _column(columns, "reference_record", i):
            meta["reference_record"] = _column(columns, "reference_record", i)
        return RewardRequest(
            task_name=_column(columns, "task_name", i), task_source=_column(columns, "task_source", i),
            completion=reply, reference_speedup=float(ref) if ref else None, meta=meta,
        )

    def _log(self, records: Sequence[RewardRecord], advantages: Sequence[float], step: int) -> None:
        if self.log_path is None:
            return
        lines = [json.dumps({**r.to_dict(), "advantage": a, "step": step}, default=str)
                 for r, a in zip(records, advantages, strict=True)]
        with self._lock:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("a") as handle:
                handle.write("\n".join(lines) + "\n")


def completion_text(completion: Any) -> str:
    """Plain text of a completion: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def batch_metrics(records: Sequence[RewardRecord], num_generations: int) -> dict[str, float]:
    """What one batch of rewards says: components, acceptance and flag rates, speedups."""
    n = len(records) or 1
    metrics: dict[str, float] = {
        "rl/raw_reward_mean": sum(r.reward for r in records) / n,
        "rl/acceptance_rate": sum(r.accepted for r in records) / n,
        "rl/integrity_flag_rate": sum(r.flagged for r in records) / n,
        "rl/no_code_rate": sum(r.status == NO_CODE for r in records) / n,
        "rl/compile_error_rate": sum(r.status == "compile_error" for r in records) / n,
        "rl/timeout_rate": sum(r.status == "timeout" for r in records) / n,
        "rl/cache_hit_rate": sum(r.cached for r in records) / n,
    }
    names = sorted({k for r in records for k in r.components})
    for name in names:
        metrics[f"rl/reward_{name}"] = sum(r.components.get(name, 0.0) for r in records) / n
    for tier in ("beats_eager", "beats_compile", "beats_reference"):
        metrics[f"rl/{tier}_rate"] = sum(tier in r.components for r in records) / n
    speedups = [r.speedup for r in records if r.speedup is not None]
    if speedups:
        metrics["rl/speedup_median"] = statistics.median(speedups)
        metrics["rl/speedup_max"] = max(speedups)
        metrics["rl/speedup_min"] = min(speedups)
    groups = [records[i:i + num_generations] for i in range(0, len(records), num_generations)]
    varied = [g for g in groups if len({r.reward for r in g}) > 1]
    metrics["rl/groups_with_signal"] = len(varied) / (len(groups) or 1)
    return metrics


def _column(columns: dict[str, Any], name: str, i: int) -> Any:
    values = columns.get(name)
    return None if values is None else values[i]
