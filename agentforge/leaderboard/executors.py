"""Where a leaderboard's evaluation jobs run: the local process pool, or a Ray cluster.

Both take the jobs and a callback that receives each result as it arrives, and return the
results in job order. The process pool runs `workers` sandboxed children at once on this
machine (give it the number of GPUs on CUDA, so that no two timings share a GPU); Ray asks for
one GPU per CUDA job and spreads jobs over the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.leaderboard.runner import Executor
from agentforge.sandbox.config import SandboxConfig

EXECUTORS = ("process", "ray")


def make_executor(
    kind: str, config: SandboxConfig, *, workers: int = 1, ray_address: str | None = None,
) -> Executor:
    """An executor by name; an unknown name lists the choices."""
    if kind == "process":
        return _process_pool(config, workers)
    if kind == "ray":
        return _ray(config, workers, ray_address)
    raise ValueError(f"unknown executor {kind!r}; choose one of: {', '.join(EXECUTORS)}")


def _process_pool(config: SandboxConfig, workers: int) -> Executor:
    def run(jobs: Sequence[EvalJob], on_result: Callable[[EvalResult], None]) -> list[EvalResult]:
        from agentforge.sandbox import run_many

        local = config.replace(kind="process")
        return run_many(list(jobs), local, workers=workers, on_result=_last_arg(on_result))

    return run


def _ray(config: SandboxConfig, workers: int, address: str | None) -> Executor:
    def run(jobs: Sequence[EvalJob], on_result: Callable[[EvalResult], None]) -> list[EvalResult]:
        from agentforge.sandbox.ray_backend import RayBackend

        backend = RayBackend(config, address=address)
        cap = workers if workers > 1 else None  # 1 (the default) means: as many as Ray can place
        return backend.run_many(jobs, workers=cap, on_result=_last_arg(on_result))

    return run


def _last_arg(callback: Callable[[EvalResult], None]) -> Callable[..., None]:
    """Callbacks called as f(result) or f(index, result) both reach `callback(result)`."""

    def call(*args: Any) -> None:
        callback(args[-1])

    return call
