"""Where a leaderboard's evaluation jobs run: the local process pool, or a Ray cluster.

Both go through the evaluator's `evaluate_many` with the sandbox kind set: the process pool runs
`workers` sandboxed children at once on this machine and never two on one GPU; Ray asks for one
GPU per CUDA job (CPUs for CPU jobs) and spreads jobs over the cluster. The callback receives
each result as it arrives; results come back in job order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.leaderboard.runner import Executor
from agentforge.sandbox.config import SandboxConfig

EXECUTORS = ("process", "ray")


def make_executor(
    kind: str, config: SandboxConfig, *, workers: int = 1, ray_address: str | None = None,
) -> Executor:
    """An executor by name; an unknown name lists the choices. `ray_address` None starts a
    local Ray cluster; "auto" joins the running one."""
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}; choose one of: {', '.join(EXECUTORS)}")
    extra = dict(config.extra)
    if kind == "ray" and ray_address:
        extra["ray_address"] = ray_address
    chosen = config.replace(kind=kind, extra=extra)

    def run(jobs: Sequence[EvalJob], on_result: Callable[[EvalResult], None]) -> list[EvalResult]:
        from agentforge.evaluation import evaluate_many

        return evaluate_many(list(jobs), chosen, workers=workers, on_result=lambda _i, r: on_result(r))

    return run
