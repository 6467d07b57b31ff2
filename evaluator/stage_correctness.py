"""Correctness stage, the judge's side: secret seeds on every shape variant, the candidate first.

Per shape: the reference `Model` is built here in the task's dtype from a secret seed, and the
worker's `ModelNew` gets its weights through `load_state_dict` (the worker sees the weights,
never the seed), so both compute the same function. Per trial: inputs from a fresh secret seed;
the worker gets a copy, runs the candidate once under its watches (aten ops, threads, precision
switches, aliasing, input mutation, work after the return) and sends back the outputs as they
were when forward returned; only then is the reference computed here, in float64 (float32 for
half-precision tasks), on the judge's own pristine inputs. The first trial of each shape also
runs the candidate again on the same buffers (a moving result) and on new contents written into
them (a cached result).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch
from agentforge.evaluator.compare import compare, reference_meta_outputs
from agentforge.evaluator.remote import RemoteModel, Unsendable, WorkerClient
from agentforge.evaluator.result import CorrectnessRecord

from agentforge.task import Task, flatten_tensors


@dataclass(frozen=True)
class CorrectnessSettings:
    trials: int
    base_seed: int
    reference_dtype: torch.dtype
    atol: float
    rtol: float
    extra_checks: bool  # determinism and caching probes (hardened track)


@dataclass
class CorrectnessOutcome:
    records: list[CorrectnessRecord] = field(default_factory=list)
    evidence: list[tuple[str, str]] = field(default_factory=list)  # (rule, evidence)
    models: dict[str, tuple[torch.nn.Module, Any]] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)  # the first trial's reference output per shape
    op_counts: dict[str, int] = field(default_factory=dict)  # aten ops the worker saw ModelNew dispatch


def reference_dtype_for(task_dtype: torch.dtype, track: str, declared: str | None) -> torch.dtype:
    if declared:
        return getattr(torch, declared)
    if track == "kernelbench":
        return task_dtype
    return torch.float32 if task_dtype in (torch.float16, torch.bfloat16) else torch.float64


def set_mode(model: torch.nn.Module) -> torch.nn.Module:
    """Training mode, as KernelBench's harness leaves its models (BatchNorm on batch statistics:
    in eval mode, fresh running statistics make several of its CNNs nearly independent of their
    input, so a constant would pass), with dropout modules off so that results are deterministic."""
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.eval()
    return model


def build_models(task: Task, model_cls: type, shape: str, seed: int, device: torch.device,
                 ) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(reference in the task's dtype, `model_cls` with the reference's weights), both in the mode
    `set_mode` gives. In-process: for trusted classes only (tools, benchmarks), never a candidate."""
    reference = set_mode(task.make_model(seed, shape, device))
    init = task.init_inputs(shape)
    with task.shape_variant(shape), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        candidate = model_cls(*init)
    if isinstance(candidate, torch.nn.Module):
        candidate = candidate.to(device)
        reference_state = reference.state_dict()
        own = candidate.state_dict()
        matching = {k: v for k, v in reference_state.items() if k in own and own[k].shape == v.shape}
        candidate.load_state_dict(matching, strict=False)
        set_mode(candidate)
    return reference, candidate


def build_remote(task: Task, client: WorkerClient, shape: str, seed: int, device: torch.device,
                 ) -> tuple[torch.nn.Module, RemoteModel]:
    """(reference, the worker's ModelNew built with the reference's weights). The worker gets the
    init inputs and the weights, never the seed."""
    reference = set_mode(task.make_model(seed, shape, device))
    candidate = RemoteModel.construct(client, shape, task.init_inputs(shape), reference.state_dict(), device)
    return reference, candidate


def upcast(values: list[Any], dtype: torch.dtype) -> list[Any]:
    return [v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def fingerprint(values: list[Any]) -> list[str]:
    prints = []
    for v in values:
        if isinstance(v, torch.Tensor):
            raw = v.detach().contiguous().cpu().view(torch.uint8) if v.numel() else v.detach().cpu()
            prints.append(hashlib.sha256(raw.numpy().tobytes()).hexdigest())
        else:
            prints.append(repr(v))
    return prints


def check_shape(task: Task, client: WorkerClient, shape: str, shape_index: int, device: torch.device,
                settings: CorrectnessSettings, outcome: CorrectnessOutcome) -> None:
    """The trials of one shape: inputs made here from secret seeds, outputs checked here against a
    reference only this process holds. The worker sees input tensors, nothing else."""
    reference, candidate = build_remote(task, client, shape, settings.base_seed, device)
    reference_hi = copy.deepcopy(reference).to(settings.reference_dtype)
    outcome.models[shape] = (reference, candidate)
    # The output dtypes of a task-precision run of the reference (a bf16 model may return fp32).
    meta_outputs = reference_meta_outputs(reference, task.make_inputs(settings.base_seed, shape, "meta"))
    dtypes = None if meta_outputs is None else tuple(t.dtype for t in flatten_tensors(meta_outputs))
    tol = dict(atol=settings.atol, rtol=settings.rtol, dtypes=dtypes)
    if meta_outputs is not None:  # a data-dependent reference cannot run on meta: no landing arena
        candidate.expect(meta_outputs)

    def reference_on(inputs: list[Any]) -> Any:
        return reference_hi(*upcast(inputs, settings.reference_dtype))

    for trial in range(settings.trials):
        seed = settings.base_seed + 1 + trial + 1000 * shape_index
        inputs = task.make_inputs(seed, shape, device)  # the worker gets a copy: these stay pristine
        where = f"shape {shape}, trial {trial + 1}"
        out, evidence = candidate.watched_call(where, inputs=inputs)
        outcome.evidence += evidence
        outcome.evidence += _output_types(out, where)
        expected = reference_on(inputs)
        outcome.expected.setdefault(shape, expected)
        result = compare(out, expected, task.dtype, **tol)
        outcome.records.append(CorrectnessRecord(
            shape=shape, seed=seed, passed=result.passed, max_abs_err=result.max_abs_err,
            max_rel_err=result.max_rel_err, failed_check=result.failed_check, message=result.message))
        if not result.passed or trial > 0 or not settings.extra_checks:
            continue
        again, evidence = candidate.watched_call(f"{where}, again")
        outcome.evidence += evidence
        if not compare(again, expected, task.dtype, **tol).passed:
            outcome.evidence.append(("nondeterministic_output",
                                     f"shape {shape}, trial {trial + 1}: a second call on the same inputs is wrong"))
        _probe_caching(task, candidate, reference_on, expected, shape, seed, device, tol, outcome)


def _output_types(out: Any, where: str) -> list[tuple[str, str]]:
    outputs = list(out) if isinstance(out, list | tuple) else [out]
    return [("output_type", f"{where}: output {i} is {_type_name(o)}, not a torch.Tensor")
            for i, o in enumerate(outputs) if not isinstance(o, torch.Tensor)]


def _type_name(value: Any) -> str:
    return value.type_name if isinstance(value, Unsendable) else type(value).__name__


def _probe_caching(task: Task, candidate: RemoteModel, reference_on: Any, previous: Any, shape: str,
                   seed: int, device: torch.device, tol: dict[str, Any], outcome: CorrectnessOutcome) -> None:
    """New contents written into the same input buffers: a result cached by pointer is wrong."""
    fresh_seed = seed + 500
    fresh = task.make_inputs(fresh_seed, shape, device)
    out, evidence = candidate.watched_call(f"shape {shape}, refilled buffers", refill=fresh)
    outcome.evidence += evidence
    expected = reference_on(fresh)
    check = compare(out, expected, task.dtype, **tol)
    if check.passed:
        return
    if compare(out, previous, task.dtype, **tol).passed:
        outcome.evidence.append(("result_caching", f"shape {shape}: new contents in the same buffers "
                                                   "returned the result for the previous ones"))
    else:
        outcome.records.append(CorrectnessRecord(
            shape=shape, seed=fresh_seed, passed=False, max_abs_err=check.max_abs_err,
            max_rel_err=check.max_rel_err, failed_check=check.failed_check,
            message="in reused input buffers: " + check.message))
