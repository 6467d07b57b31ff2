"""Roofline and profile stages: what the hardware saw, for the judge and the reports.

Both degrade to a value saying why not (unknown ceilings, no GPU, no ncu) and never fail the
evaluation.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from agentforge.evaluator import build_cache
from agentforge.evaluator.result import EvalJob, ProfileRecord, RooflineRecord, to_json

from agentforge.task import Task


def roofline_for(task: Task, shape: str, device: torch.device, measured_us: float) -> RooflineRecord | None:
    from agentforge.evaluator.hardware.ceilings import load_ceilings
    from agentforge.evaluator.hardware.roofline import analyze

    ceilings = load_ceilings(device=str(device), cache_dir=build_cache.cache_root())
    return analyze(task.flops(shape), task.bytes_moved(shape), measured_us, ceilings, dtype=task.dtype_name)


# The profile is the last stage and optional: it must never cost the verdict the stages before it
# earned. The profiled program builds from the warm cache (profile_target), so a profile takes
# seconds; past this, ncu is stopped and the profile is "unavailable", well inside the job's
# wall-clock budget (SandboxConfig.timeout_s, 600 s by default).
PROFILE_TIMEOUT_S = 120.0


def profile(job: EvalJob, device: torch.device) -> ProfileRecord | None:
    """Nsight Compute over one call of the candidate, in a grandchild inside the same sandbox."""
    if not job.measure.profile:
        return None
    if device.type != "cuda":
        return ProfileRecord(available=False, reason="no CUDA device: Nsight Compute profiles GPU kernels only")
    from agentforge.evaluator.hardware.ncu import NcuOptions, profile_command

    with tempfile.TemporaryDirectory(prefix="agentforge-profile-") as tmp:
        job_file = Path(tmp) / "job.json"
        job_file.write_text(to_json(job))
        command = [sys.executable, "-m", "agentforge.evaluator.worker.profile_target", str(job_file)]
        return profile_command(command, NcuOptions(timeout_s=PROFILE_TIMEOUT_S), cwd=tmp)


