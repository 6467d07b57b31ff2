"""The task probe's verdict kept per task text, so a task is sized in a sandbox once, not per job.

The probe (`preflight.run_probe`) imports the task in a sandbox child, with no candidate code, and
sizes its shapes: a child start and a torch import, seconds on two cores, for figures that depend
only on the task's text, the code that sizes it, torch's version and the machine. The parent keeps
an ok verdict in the build cache's trusted tree (written by the parent alone, never by a sandbox);
a CUDA job is probed afresh each time, since the GPU's free memory is among its figures.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from importlib import metadata
from pathlib import Path

from agentforge.evaluator.build_cache import DEFAULT_CACHE_DIR, TRUSTED_TREE
from agentforge.evaluator.result import EvalJob, EvalResult, Status

FORMAT = "1"
# The modules whose code decides the probe's figures: a change to any of them is a new key.
SIZING_MODULES = ("agentforge.task", "agentforge.audit", "agentforge.agent.preflight", "agentforge.agent.probe_cache")


def _folder(job: EvalJob) -> Path:
    return Path(job.cache_dir or DEFAULT_CACHE_DIR).expanduser() / TRUSTED_TREE / "probes"


def key(job: EvalJob) -> str | None:
    """None for jobs that are probed afresh (a GPU's memory is among the figures)."""
    if job.device.startswith("cuda") or (job.device == "auto" and os.path.exists("/dev/nvidiactl")):
        return None
    digest = hashlib.sha256(FORMAT.encode())
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    parts = [job.task_name, job.task_source, job.device, job.backend, job.track, ",".join(job.shapes),
             torch_version, str(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))]
    for name in SIZING_MODULES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        parts.append(Path(origin).read_text() if origin else name)
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def load(job: EvalJob) -> EvalResult | None:
    name = key(job)
    if name is None:
        return None
    try:
        return EvalResult.from_json((_folder(job) / f"{name}.json").read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save(job: EvalJob, result: EvalResult) -> None:
    """Keep an ok probe (a failed one is probed again: the machine may have been the cause)."""
    name = key(job)
    if name is None or result.status != Status.OK:
        return
    folder = _folder(job)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".{name}.{os.getpid()}.tmp"
        staging.write_text(result.to_json())
        os.replace(staging, folder / f"{name}.json")
    except OSError:
        return  # only an optimisation
