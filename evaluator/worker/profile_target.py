"""The program Nsight Compute profiles: build the candidate, warm it up, then one call inside
the NVTX range the profiler filters on. Run as `python -m agentforge.evaluator.worker.profile_target JOB`.

It builds from the job's build cache, where the candidate worker already built the same source:
without it the build would start cold in the job folder (`HOME`), and ncu (`--target-processes
all`) would profile a 30-60 s `load_inline` build under its timeout. It inherits the judge's
environment, so it sees the same single GPU (`CUDA_VISIBLE_DEVICES`) as `cuda:0`."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from agentforge.evaluator import build_cache
from agentforge.evaluator.models import build_models
from agentforge.evaluator.result import EvalJob
from agentforge.evaluator.worker.loading import LoadOutcome, load_candidate

from agentforge.task import Task

NVTX_RANGE = "agentforge_candidate"


def build(job: EvalJob) -> LoadOutcome:
    """The candidate's module, built (or found) in the job's build cache."""
    build_cache.set_cache_root(job.cache_dir)
    return load_candidate(job.candidate_source, job.backend, False, job.cuda_arch, "agentforge_profiled")


def main(job_path: str) -> int:
    """Profiled with the judge's and the worker's numeric switches (TF32 off among them): a fresh
    process starts with torch's defaults, under which cuDNN picks TF32 kernels for fp32
    convolutions, and the profile would show kernels other than the ones that were timed."""
    from agentforge.evaluator.numerics import numeric_switches

    with numeric_switches(True):
        return _profiled(job_path)


def _profiled(job_path: str) -> int:
    job = EvalJob.from_json(Path(job_path).read_text())
    task = Task(job.task_name, job.task_source)
    device = torch.device(job.device if ":" in job.device else "cuda:0")
    loaded = build(job)
    if loaded.model_cls is None:
        return 1
    shape = job.timing_shape if job.timing_shape in task.shapes else "default"
    _, candidate = build_models(task, loaded.model_cls, shape, job.correctness.base_seed or 0, device)
    inputs = task.make_inputs((job.correctness.base_seed or 0) + 1, shape, device)
    with torch.no_grad():
        for _ in range(3):
            candidate(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        candidate(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
