"""Before anything is spent on a task (a build, an LLM call), check it without importing it here.

`eval` and `optimize` both call `preflight`: the task's shape names are read from its text (an
unknown --shape is a usage error), a sandbox child imports the task and sizes each shape on the
meta device (`agentforge.task.probe_entry`; no candidate code runs there), and a shape whose
evaluation cannot fit in the memory this machine gives the sandbox is refused, naming the shapes
that fit. A task that hangs, dies or fails to load in that child is a `task_error` verdict: the
task's fault, never a candidate's. The evaluator still checks the task's reference on each shape
itself, inside every job; this only spares the caller a build or a paid round on a task that
cannot work here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentforge.evaluator.result import EvalJob, EvalResult
    from agentforge.sandbox.config import SandboxConfig
    from agentforge.task import TaskText

PROBE_ENTRY = "agentforge.task:probe_entry"
PROBE_TIMEOUT_S = 120.0  # importing a task and sizing its shapes on the meta device
# What one evaluation holds at its peak: about BASE plus FACTOR times one call's tensors (inputs,
# outputs, parameters) at the task's dtype, per kind of device.
# CPU: the sandbox's process tree (the quantity its memory watchdog limits), measured on fp32 ReLU
# shapes by polling the tree's resident memory (2-core CPU VM, torch 2.13, eager and torch.compile
# baselines): 2.8 GiB at 1 KB of tensors, 4.5 GiB at 64 MiB, 6.1 GiB at 128 MiB, i.e. about 27x
# the tensors beyond the base (float64 reference copies, pristine inputs, a pool of fresh inputs
# for timing, the baselines), rounded up for what the measurement could not see.
# CUDA: not yet measured (no GPU lent so far), so a lower bound only refuses what cannot fit:
# the tensors, their float64 reference copies (2x) and the candidate's outputs.
FOOTPRINT = {"cpu": (3 * 2**30, 32.0), "cuda": (2**30, 6.0)}


class PreflightError(Exception):
    """The task cannot be evaluated as asked (an unknown shape, a model hub, too large for this
    machine); one line, with what a JSON reader needs beside it (`extra`)."""

    def __init__(self, kind: str, message: str, task_name: str | None = None, **extra: Any):
        super().__init__(message)
        self.kind, self.message, self.task_name, self.extra = kind, message, task_name, extra


def check_text(task: TaskText, shapes: tuple[str, ...]) -> None:
    """What the task's text alone decides: a model hub, or a --shape it does not declare."""
    from agentforge.task import model_hub_use

    hub = model_hub_use(task.source)
    if hub is not None:
        raise PreflightError("ModelHub", f"{task.path or task.name}: needs a model hub ({hub}; KernelBench "
                             "level 4), which agentforge does not download from", task.name)
    check_shape_names(task.name, task.shape_names, shapes)


def check_shape_names(name: str, known: tuple[str, ...] | None, shapes: tuple[str, ...]) -> None:
    if known is None:  # SHAPES is not a literal: only the probe can tell
        return
    unknown = [s for s in shapes if s not in known]
    if unknown:
        listed = ", ".join(repr(s) for s in unknown)
        raise PreflightError("UnknownShape", f"{name} has no shape {listed}; its shapes: {', '.join(known)}",
                             name, shapes=list(known))


def preflight(task: TaskText, job: EvalJob, sandbox: SandboxConfig, memory_gb: float) -> EvalResult | None:
    """None when the job's task can be evaluated here; a `task_error` (or the sandbox's own
    failure) verdict when it cannot run at all; PreflightError for a usage problem."""
    return prepare(task, job, sandbox, memory_gb).failed


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What `prepare` found: the task and job to evaluate (a CPU job on a problem that declares no
    shape variants gets a derived `cpu` one), a verdict when nothing can run, and one-line notes
    for the user (the derived shape; what runs instead of a GPU)."""

    task: TaskText
    job: EvalJob
    failed: EvalResult | None = None
    notes: tuple[str, ...] = ()


def prepare(task: TaskText, job: EvalJob, sandbox: SandboxConfig, memory_gb: float) -> Prepared:
    """`preflight`, keeping what the probe found: the job to run and what to tell the user."""
    from agentforge.agent.no_gpu import cuda_without_gpu, interpretable, triton_without_gpu

    check_text(task, job.shapes)
    probe = run_probe(job, sandbox)
    if probe.status.value != "ok":
        return Prepared(task, job, probe)
    figures = probe.candidate_meta["task_probe"]
    notes: list[str] = []
    if figures.get("derived"):
        task, job = with_derived_shape(task, job, figures["derived"])
        notes.append(derived_note(task))
    known = tuple(figures["shapes"])
    check_shape_names(task.name, known, job.shapes)
    wanted = ("default",) if job.track == "kernelbench" else (job.shapes or known)
    plan = cuda_without_gpu(job, figures, wanted)
    interpreted = triton_without_gpu(job, figures, wanted)
    for found in (plan, interpreted):
        if found is not None:
            wanted = found.executed
            notes.append(found.note)
    if interpreted is not None and interpreted.compiled_only and not job.shapes:
        job = dataclasses.replace(job, shapes=interpreted.executed)  # the others are dry-launched and compiled
    runnable = interpretable(figures, known) if interpreted is not None else known
    check_memory(task.name, figures, wanted, runnable, memory_gb, job.device)
    return Prepared(task, job, None, tuple(notes))


def with_derived_shape(task: TaskText, job: EvalJob, derived: dict[str, Any]) -> tuple[TaskText, EvalJob]:
    """The task with the probe's derived `cpu` variant, and the job checking and timing it."""
    task = task.with_derived_shape(derived)
    job = dataclasses.replace(job, task_source=task.source, shapes=(derived["name"],),
                              timing_shape=derived["name"],
                              candidate_meta={**job.candidate_meta, "derived_shape": task.derived_shape})
    return task, job


def derived_note(task: TaskText, hint: str = " (--shape default runs the file's own sizes)") -> str:
    derived = task.derived_shape or {}
    return (f"{task.name} declares no shape sized for a CPU: checking and timing the shape "
            f"'{derived.get('name')}' derived from its sizes, divided by {derived.get('divisor')}: "
            f"{derived.get('description')}{hint}")


def run_probe(job: EvalJob, sandbox: SandboxConfig) -> EvalResult:
    """The task imported and its shapes sized in a sandbox child, no candidate code there. Any
    failure but the sandbox's own is the task's: it was the only code that ran."""
    from agentforge.agent import probe_cache
    from agentforge.candidate import code_hash
    from agentforge.evaluation import evaluate
    from agentforge.evaluator.result import ErrorRecord, Stage, Status

    config = sandbox.replace(entry=PROBE_ENTRY, timeout_s=min(sandbox.timeout_s, PROBE_TIMEOUT_S),
                             warm_spares=0)  # one probe per task: a spare would only compete with the evaluation
    cached = probe_cache.load(job)
    if cached is not None:
        return dataclasses.replace(cached, candidate_hash=code_hash(job.candidate_source))
    result = evaluate(dataclasses.replace(job, candidate_source=""), config)
    probe_cache.save(job, result)
    result = dataclasses.replace(result, candidate_hash=code_hash(job.candidate_source))
    error = result.error or ErrorRecord(type="NoResult", message="no verdict")
    if result.status in (Status.OK, Status.TASK_ERROR) or error.type == "SandboxError":
        return result
    if result.status == Status.TIMEOUT:
        kind, what = "TaskTimeout", f"importing it and sizing its shapes ran past {config.timeout_s:g} s"
    elif error.type == "MemoryLimit":
        kind, what = "TaskMemoryError", f"importing it ran out of memory ({error.message})"
    else:
        kind = "TaskLoadError"
        what = f"the process importing it ended without a verdict ({error.type}: {error.message})"
    error = dataclasses.replace(error, type=kind, message=f"task {job.task_name}: {what}"[:2000])
    return dataclasses.replace(result, status=Status.TASK_ERROR, stage=Stage.TASK, error=error)


def check_memory(name: str, figures: dict[str, Any], wanted: tuple[str, ...], known: tuple[str, ...],
                 memory_gb: float, device: str) -> None:
    """Refuse a wanted shape whose evaluation cannot fit here, naming the shapes that fit."""
    memory = figures.get("memory") or {}
    budget, where = memory_budget(memory, memory_gb, device)
    kind = "cuda" if memory.get("kind") == "cuda" else "cpu"
    needed = {s: needed_bytes(figures["shapes"].get(s) or {}, kind) for s in known}
    too_big = [s for s in wanted if (n := needed.get(s)) is not None and n > budget]
    if not too_big:
        return
    fit = [s for s in known if (n := needed[s]) is not None and n <= budget]
    sizes = ", ".join(f"'{s}' needs about {_gib(needed[s])}" for s in too_big)
    advice = (f"shapes that fit: {', '.join(fit)} (run with {' '.join(f'--shape {s}' for s in fit)})" if fit
              else "no shape of it fits (declare a smaller variant in its SHAPES, or raise sandbox.memory_gb "
              "where the machine has the memory)")
    raise PreflightError("ShapeTooLarge", f"{name}: {sizes} to evaluate, more than the {_gib(budget)} {where}; "
                         f"{advice}", name, shapes_that_fit=fit,
                         needed_bytes={s: n for s, n in needed.items() if n is not None and n != float("inf")},
                         available_bytes=budget)


def memory_budget(memory: dict[str, Any], memory_gb: float, device: str) -> tuple[float, str]:
    """What one evaluation may hold: the GPU's free memory for a CUDA job; else the sandbox's
    memory limit, or the machine's total memory when that is less. The machine's size, not its
    momentary free memory: what fits should not depend on what else happens to run."""
    limit = float(memory_gb) * 2**30
    if memory.get("kind") == "cuda" and memory.get("free_bytes") is not None:
        return float(memory["free_bytes"]), f"free on {device}"
    total = memory.get("total_bytes")
    if total is not None and total < limit:
        return float(total), "this machine has"
    return limit, f"the sandbox may use (sandbox.memory_gb = {memory_gb:g})"


def needed_bytes(footprint: dict[str, Any], kind: str = "cpu") -> float | None:
    """The estimated peak of one evaluation of a shape on a kind of device (cpu, cuda) from the
    probe's figures; None when the shape could not be sized (the evaluator's own task check will
    tell what is wrong with it)."""
    if footprint.get("too_large"):
        return float("inf")
    if "inputs" not in footprint:
        return None
    outputs = footprint["outputs"] if footprint["outputs"] is not None else footprint["inputs"]
    tensors = max(footprint["inputs"] + outputs, footprint.get("declared") or 0.0) + footprint["params"]
    base, factor = FOOTPRINT[kind]
    return base + factor * tensors


def _gib(value: float) -> str:
    return "more than it could size" if value == float("inf") else f"{value / 2**30:.1f} GiB"
