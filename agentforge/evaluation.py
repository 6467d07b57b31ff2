"""The public API: build a job, evaluate it in the sandbox, one or many at a time.

Every consumer (the agent, the leaderboard, the RL reward, the kernel library) goes through here;
nobody times, checks or compiles a kernel anywhere else. It sits above both rooms: the evaluator
says what a job is and how it is judged, the sandbox where it runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agentforge import sandbox as sandbox_pkg
from agentforge.evaluator.api import default_device, make_job
from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.sandbox.config import SandboxConfig

__all__ = ["default_device", "evaluate", "evaluate_many", "make_job"]


def evaluate(job: EvalJob, sandbox: SandboxConfig | None = None) -> EvalResult:
    """One job in an isolated child process. Never raises for anything the candidate does."""
    config = sandbox or sandbox_pkg.SandboxConfig()
    return sandbox_pkg.run(_with_cache(job, config), config)


def evaluate_many(
    jobs: Sequence[EvalJob], sandbox: SandboxConfig | None = None, workers: int = 1,
    on_result: Callable[[int, EvalResult], Any] | None = None,
) -> list[EvalResult]:
    """Many jobs, results in input order; on CUDA no two timings share a GPU at once."""
    config = sandbox or sandbox_pkg.SandboxConfig()
    jobs = [_with_cache(job, config) for job in jobs]
    return sandbox_pkg.run_many(jobs, config, workers=workers, on_result=on_result)


def _with_cache(job: EvalJob, config: SandboxConfig) -> EvalJob:
    """The child builds into the cache folder the sandbox mounts writable."""
    return job if job.cache_dir else replace(job, cache_dir=config.cache_dir)
