"""Where an evaluation job runs: a limited child process (default), a container, a Ray pool.

    from agentforge.sandbox import SandboxConfig, run, run_many
    result = run(job, SandboxConfig(timeout_s=120))

`run` always returns an EvalResult: a hang is `timeout`, a dead child is `crash` with its signal
and stderr tail. Only this package starts processes; the parent never imports a candidate.
See docs/sandbox.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.sandbox.config import SandboxConfig, from_settings
from agentforge.sandbox.isolation import SandboxUnavailable
from agentforge.sandbox.registry import Backend, backend_names, get_backend, register_backend

__all__ = [
    "Backend", "SandboxConfig", "SandboxUnavailable", "backend_names", "from_settings", "get_backend",
    "prestart", "register_backend", "run", "run_many",
]


def run(job: EvalJob, config: SandboxConfig | None = None) -> EvalResult:
    """Evaluate `job` in the sandbox `config.kind` names."""
    config = config or SandboxConfig()
    return get_backend(config.kind, config).run(job)


def prestart(config: SandboxConfig | None = None, *, device: str = "auto", backend: str = "auto",
             compiles: bool = False) -> None:
    """Start a warm child now for a job on `device` with `backend` (as the job will name them;
    "auto" resolved as the backend resolves it), where the backend keeps spares (CPU jobs of the
    process backend). A command calls it first, before it imports torch itself: the child starts
    Python and torch while the command reads and probes its task. Nothing is started otherwise.
    `compiles`: the job will time a torch.compile baseline, so the child imports Inductor too."""
    config = config or SandboxConfig()
    backend_impl = get_backend(config.kind, config)
    prestart_for = getattr(backend_impl, "prestart", None)
    if prestart_for is not None:
        prestart_for(device, backend, compiles)


def run_many(jobs: Sequence[EvalJob], config: SandboxConfig | None = None, workers: int = 1,
             on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
    """Evaluate `jobs`, up to `workers` at once (never two on one GPU); results in input order."""
    config = config or SandboxConfig()
    return get_backend(config.kind, config).run_many(jobs, workers=workers, on_result=on_result)
