"""The evaluator's public API: build a job, evaluate it in the sandbox, one or many at a time.

Every consumer (the agent, the leaderboard, the RL reward, the kernel library) goes through
here; nobody times, checks or compiles a kernel anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentforge.evaluator.result import CorrectnessConfig, EvalJob, EvalResult, Measure, TimingConfig

from agentforge.candidate import Candidate
from agentforge.task import DEFAULT_SHAPE, Task, TaskText, backend_default_shapes

if TYPE_CHECKING:
    from agentforge.sandbox.config import SandboxConfig


def default_device(backend: str) -> str:
    """cuda for GPU backends when a GPU is visible, else cpu (compile-only for CUDA sources)."""
    import torch

    if backend == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def make_job(
    task: Task | TaskText, candidate: Candidate, *, device: str | None = None, track: str = "hardened",
    shapes: Sequence[str] = (), measure: Measure | None = None, timing: TimingConfig | None = None,
    correctness: CorrectnessConfig | None = None, cuda_arch: str = "sm_90a", compile_only: bool = False,
    cache_dir: str | None = None, timing_shape: str = "default", emulate: bool = True,
) -> EvalJob:
    if track not in ("hardened", "kernelbench"):
        raise ValueError(f"unknown track {track!r}; choose hardened or kernelbench")
    if not shapes and track == "hardened":
        shapes = backend_default_shapes(_shape_names(task), candidate.backend)
        if shapes and timing_shape == DEFAULT_SHAPE:
            timing_shape = shapes[0]
    return EvalJob(
        task_name=task.name, task_source=task.source, candidate_source=candidate.source,
        backend=candidate.backend, device=device or default_device(candidate.backend), track=track,
        shapes=tuple(shapes), timing_shape=timing_shape, measure=measure or Measure(),
        timing=timing or TimingConfig(), correctness=correctness or CorrectnessConfig(), cuda_arch=cuda_arch,
        compile_only=compile_only, emulate=emulate, cache_dir=cache_dir,
        candidate_meta={"provenance": vars(candidate.provenance).copy(),
                        **({"derived_shape": task.derived_shape} if getattr(task, "derived_shape", None) else {})},
    )


def _shape_names(task: Task | TaskText) -> tuple[str, ...] | None:
    return tuple(task.shapes) if isinstance(task, Task) else task.shape_names


def evaluate(job: EvalJob, sandbox: SandboxConfig | None = None) -> EvalResult:
    """One job in an isolated child process. Never raises for anything the candidate does."""
    from agentforge import sandbox as sandbox_pkg

    config = sandbox or sandbox_pkg.SandboxConfig()
    return sandbox_pkg.run(_with_cache(job, config), config)


def evaluate_many(
    jobs: Sequence[EvalJob], sandbox: SandboxConfig | None = None, workers: int = 1,
    on_result: Callable[[int, EvalResult], Any] | None = None,
) -> list[EvalResult]:
    """Many jobs, results in input order; on CUDA no two timings share a GPU at once."""
    from agentforge import sandbox as sandbox_pkg

    config = sandbox or sandbox_pkg.SandboxConfig()
    jobs = [_with_cache(job, config) for job in jobs]
    return sandbox_pkg.run_many(jobs, config, workers=workers, on_result=on_result)


def _with_cache(job: EvalJob, config: SandboxConfig) -> EvalJob:
    """The child builds into the cache folder the sandbox mounts writable."""
    return job if job.cache_dir else replace(job, cache_dir=config.cache_dir)
