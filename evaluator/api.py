"""Jobs: what one evaluation is asked to do (`make_job`), and the device it runs on by default.
Running them belongs to the sandbox (`agentforge.evaluation.evaluate`)."""

from __future__ import annotations

from collections.abc import Sequence

from agentforge.evaluator.result import CorrectnessConfig, EvalJob, Measure, TimingConfig

from agentforge.candidate import Candidate
from agentforge.task import DEFAULT_SHAPE, Task, TaskText, backend_default_shapes


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
