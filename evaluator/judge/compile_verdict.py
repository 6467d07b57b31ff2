"""The judge's half of a compile-only CUDA verdict: drive the candidate, read what it built.

Two drives reach the builds. A compile-only job (`judge`): after the candidate module loaded in
the worker, the judge asks it to construct `ModelNew` and call `forward` under the CUDA lookalike
(`cuda_lookalike`, worker side), with the task's init inputs and the shapes and dtypes of its
inputs for one shape variant (empty tensors are made there, on a device that holds no memory).
An emulated job (`judge_emulated`): the correctness stage itself drove the candidate in the CPU
emulation's worker, whose every build was also the compile-only build (`cuda_emulation.
environment`); the judge then asks for the builds' report. Either reply is read strictly, as
every reply of the worker is, and becomes the build stage's verdict:

* any build that failed: `compile_error`, with the first compiler error (and the API drift
  notes) in the message, whether or not the candidate caught the exception;
* no CUDA source compiled at all: `no_cuda_build`, saying how far the drive got;
* otherwise `ok` at the build stage, with how far the drive got in the log's last line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from agentforge.evaluator.judge.remote import WorkerBroken, WorkerClient
from agentforge.evaluator.protocol.messages import BuildReport, Drive, evidence_items
from agentforge.evaluator.result import CompileRecord, ErrorRecord, Status, from_plain

from agentforge.task import Task, flatten_tensors


@dataclass(frozen=True)
class CompileVerdict:
    status: Status
    compile: CompileRecord
    error: ErrorRecord | None
    build_findings: list[tuple[str, str]]


def input_specs(task: Task, shape: str) -> list[Any]:
    """The inputs of one call as `{"__empty__": [shape, dtype]}` (floating ones at the task's
    dtype), found on the meta device; numbers and other values as they are."""
    try:
        with task.shape_variant(shape), torch.device("meta"):
            inputs = list(task.module.get_inputs())
    except Exception:  # an input built from values (data-dependent): made once on the CPU
        inputs = task.make_inputs(0, shape, "cpu")
    specs = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            dtype = task.dtype if value.is_floating_point() else value.dtype
            specs.append({"__empty__": [list(value.shape), str(dtype).removeprefix("torch.")]})
        elif not list(flatten_tensors(value)):
            specs.append(value)
        else:
            raise ValueError("nested tensor inputs are not sized here")
    return specs


def judge(client: WorkerClient, task: Task, shape: str, backend: str, arch: str) -> CompileVerdict:
    """Drive the loaded candidate in the worker (fake tensors) and decide the build stage from its builds."""
    reply = client.send(Drive(init=list(task.init_inputs(shape)), inputs=input_specs(task, shape), arch=arch,
                              backend=backend))
    return read(reply, backend, "under the CUDA lookalike")


def judge_emulated(client: WorkerClient, backend: str, arch: str) -> CompileVerdict:
    """The build stage of an emulated run, from the builds its drive (the correctness stage) made."""
    return read(client.send(BuildReport(backend=backend, arch=arch)), backend, "in the CPU emulation")


def read(reply: dict[str, Any], backend: str, how: str) -> CompileVerdict:
    """The worker's build report, read as data, as the build stage's verdict."""
    try:
        record = from_plain(CompileRecord, reply["compile"])
        error = from_plain(ErrorRecord, reply["error"]) if reply.get("error") is not None else None
        failed, built = reply["compile_failed"], reply["cuda_built"]
        reached, stopped = str(reply["reached"])[:20], str(reply["stopped"])[:500]
        builds = int(reply["builds"])
        launches = [str(x)[:200] for x in reply.get("launches", [])[:50]]
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkerBroken(f"the compile-only report is malformed: {exc}") from exc
    if type(failed) is not bool or type(built) is not bool or record.backend != backend:
        raise WorkerBroken("the compile-only report is malformed")
    progress = (f"compile-only: {builds} build(s); ModelNew driven {how} up to {reached}"
                + (f" ({len(launches)} launch(es) skipped: {', '.join(sorted(set(launches))[:5])})" if launches else "")
                + (f"; stopped by {stopped}" if stopped else ""))
    record = replace(record, log_tail=f"{record.log_tail}\n{progress}".strip()[-6000:])
    findings = evidence_items(reply.get("build_findings", []))
    if failed:
        return CompileVerdict(Status.COMPILE_ERROR, replace(record, ok=False), error or ErrorRecord(
            type="BuildError", message="a build failed"), findings)
    if backend == "cuda" and not built:
        return CompileVerdict(Status.NO_CUDA_BUILD, replace(record, ok=False), ErrorRecord(
            type="NoCudaBuild", message=f"the candidate compiled no CUDA code: {progress}"), findings)
    return CompileVerdict(Status.OK, record, None, findings)
