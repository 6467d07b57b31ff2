"""The judge's native samples of the worker (`native_sampler`) joined to a finished verdict.

Runs in the judge (the sandbox child) after the pipeline returned: the sampler's report goes into the
verdict's provenance (`track_settings["native_sampling"]`: counts per phase and kind, the profiling
coverage of the timed calls), and the flags `integrity.native_sampling_findings` draws from it join the
verdict's; a rejecting one turns an `ok` verdict into `integrity_flag`. A task may set
`NATIVE_OWN_FLOOR` (the least share of the timed calls' compute samples in the candidate's own builds,
default `integrity.NATIVE_OWN_FLOOR`) and `ALLOWED_LIBRARIES` (kinds it permits: "blas", "torch"); a
task that lists `ALLOWED_TORCH_OPS` permits "torch". On the CPU backend only: see `apply`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentforge.evaluator import integrity
from agentforge.evaluator.result import EvalResult, Status


def task_allowances(task_source: str, task_name: str) -> tuple[float, tuple[str, ...]]:
    """(own floor, allowed kinds) declared by the task; the defaults where it declares none or fails to load."""
    try:
        from agentforge.task import Task

        task = Task(task_name, task_source)
    except Exception:
        return integrity.NATIVE_OWN_FLOOR, ()
    floor = getattr(task.module, "NATIVE_OWN_FLOOR", integrity.NATIVE_OWN_FLOOR)
    if not isinstance(floor, int | float) or not 0.0 <= float(floor) <= 1.0:
        floor = integrity.NATIVE_OWN_FLOOR
    allowed = tuple(str(k) for k in getattr(task.module, "ALLOWED_LIBRARIES", ()) or ())
    if task.allowed_torch_ops:
        allowed += ("torch",)
    return float(floor), allowed


def apply(result: EvalResult, report: dict[str, Any], task_source: str, task_name: str,
          device: str = "cpu") -> EvalResult:
    """`result` with the sampler's report in its provenance and its flags among the verdict's. On a
    GPU the host's samples say little about where the work went (a timed call spends its CPU waiting
    for the device in the driver): the judge does not sample there (`sandbox/child.py`), and a report
    that came anyway is judged for `observer_blocked` only."""
    floor, allowed = task_allowances(task_source, task_name)
    if str(device).startswith("cuda"):
        allowed += ("torch", "blas")
    findings, summary = integrity.native_sampling_findings(report, floor, allowed)
    if result.provenance is not None:
        settings = {**result.provenance.track_settings, "native_sampling": {**report, "coverage": summary}}
        result = dataclasses.replace(result, provenance=dataclasses.replace(result.provenance,
                                                                            track_settings=settings))
    seen = {(f.rule, f.evidence) for f in result.flags}
    new = [integrity.flag(f.rule, f.evidence) for f in findings if (f.rule, f.evidence) not in seen]
    if not new:
        return result
    result = dataclasses.replace(result, flags=(*result.flags, *new))
    if result.status == Status.OK and any(f.severity == "reject" for f in new):
        result = dataclasses.replace(result, status=Status.INTEGRITY_FLAG)
    return result
