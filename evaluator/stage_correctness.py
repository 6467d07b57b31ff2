"""Correctness stage: fresh seeds on every shape variant, the candidate before the reference.

Per shape: the reference `Model` is built in the task's dtype from a seed, and `ModelNew` gets
its weights through `load_state_dict`, so both compute the same function. Per trial: inputs
from a fresh seed; free device memory poisoned; the candidate runs (its aten ops recorded);
its inputs are fingerprinted before and after; its outputs must be plain tensors; only then is
the reference computed, in float64 (float32 for half-precision tasks), on pristine copies.
The first trial of each shape also runs the candidate again on the same inputs (a moving
result) and on new contents written into the same buffers (a cached result).

Every candidate call is watched (`_call_candidate`): the aten ops it dispatches, the modules it
calls (the reference `Model`, however found), threads or processes still running the moment it
returns, and whether the harness's own functions are still the ones this module saw at import.
Its outputs are copied the moment it returns (stream-ordered on CUDA), and that copy is what gets
compared: work that lands after the return (a side stream, a native or Python thread, a lazy
evaluation) is wrong there, and an output that still changes afterwards is flagged as such.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch
from agentforge.evaluator import device_state, integrity, native
from agentforge.evaluator.compare import compare, reference_output_dtypes, same_result
from agentforge.evaluator.guards import (
    ConcurrencyWatch,
    ModuleCallWatch,
    OpRecorder,
    TamperSnapshot,
    inspect_outputs,
    precision_switches,
)
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
    recorder: OpRecorder = field(default_factory=OpRecorder)
    models: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = field(default_factory=dict)


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
    """(reference in the task's dtype, candidate with the reference's weights), both in the mode
    `set_mode` gives."""
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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _copy_at_return(out: Any) -> Any:
    """The outputs as they are when forward returns (plain tensors; non-tensors as they are)."""
    if isinstance(out, torch.Tensor):
        return torch.Tensor.clone(out).as_subclass(torch.Tensor)
    if isinstance(out, list | tuple):
        return type(out)(_copy_at_return(o) for o in out)
    return out


def _settled(out: Any, copy_at_return: Any, device: torch.device, where: str, outcome: CorrectnessOutcome) -> Any:
    """Wait for the device; the outputs must not have changed since the return. Returns the copy."""
    _sync(device)
    tensors = list(flatten_tensors(out))
    plain = all(type(t) is torch.Tensor and t.layout == torch.strided and not t.is_meta for t in tensors)
    if tensors and plain and not same_result(copy_at_return, tensors):  # subclasses: `inspect_outputs` flags them
        outcome.evidence.append(("unsynchronized_work", f"{where}: the output changed after forward returned "
                                                        "(work outside the call: a thread, a side stream)"))
    return copy_at_return


def _call_candidate(candidate: Any, inputs: list[Any], reference_cls: type, where: str,
                    outcome: CorrectnessOutcome) -> tuple[Any, Any]:
    """One watched call of the candidate: (its outputs, their copy at return). What it did wrong goes
    to `outcome.evidence`."""
    watch = ConcurrencyWatch.start()
    switches = precision_switches()
    with outcome.recorder, ModuleCallWatch() as modules:
        out = candidate(*inputs)
    at_return = _copy_at_return(out)
    outcome.evidence += [("background_work", item) for item in watch.still_running(f"when forward returned ({where})")]
    called = modules.called(reference_cls)
    if called:
        outcome.evidence.append(("reference_reuse", f"{where}: ModelNew.forward called the reference "
                                                    f"({', '.join(called)})"))
    patched, _ = _HARNESS.changes()  # switches: compared with just before the call (the sandbox pins them)
    if patched:
        outcome.evidence.append(("monkey_patch", f"{where}: the call replaced " + ", ".join(patched[:10])))
    now = precision_switches()
    switched = [f"{k}: {v!r} -> {now[k]!r}" for k, v in switches.items() if now[k] != v]
    if switched:
        outcome.evidence.append(("precision_switch", f"{where}: " + "; ".join(switched)))
    return out, at_return


def check_shape(task: Task, model_cls: type, shape: str, shape_index: int, device: torch.device,
                settings: CorrectnessSettings, outcome: CorrectnessOutcome, allowed_ops: tuple[str, ...]) -> None:
    reference_cls = task.module.Model
    if shape_index == 0:
        # What was built, as the compiler saw it (flags and pragmas assembled at run time included).
        outcome.evidence += [(f.rule, f.evidence) for f in integrity.build_findings(native.BUILD_EVENTS)]
        if isinstance(model_cls, type) and issubclass(model_cls, reference_cls):
            outcome.evidence.append(("reference_reuse", "ModelNew is a subclass of the task's Model"))
    reference, candidate = build_models(task, model_cls, shape, settings.base_seed, device)
    reference_hi = copy.deepcopy(reference).to(settings.reference_dtype)
    outcome.models[shape] = (reference, candidate)
    # The output dtypes of a task-precision run of the reference (a bf16 model may return fp32).
    dtypes = reference_output_dtypes(reference, task.make_inputs(settings.base_seed, shape, "meta"))
    tol = dict(atol=settings.atol, rtol=settings.rtol, dtypes=dtypes)

    def reference_on(inputs: list[Any]) -> Any:
        return reference_hi(*upcast(inputs, settings.reference_dtype))

    for trial in range(settings.trials):
        seed = settings.base_seed + 1 + trial + 1000 * shape_index
        inputs = task.make_inputs(seed, shape, device)
        before = fingerprint(inputs)
        device_state.poison_free_memory(device)
        where = f"shape {shape}, seed {seed}"
        raw, at_return = _call_candidate(candidate, inputs, reference_cls, where, outcome)
        out = _settled(raw, at_return, device, where, outcome)
        outputs = list(raw) if isinstance(raw, list | tuple) else [raw]
        outcome.evidence += inspect_outputs(outputs, inputs)
        if fingerprint(inputs) != before:
            changed = [i for i, (a, b) in enumerate(zip(before, fingerprint(inputs), strict=True)) if a != b]
            outcome.evidence.append(("input_mutation", f"shape {shape}, seed {seed}: inputs {changed} changed"))
        pristine = task.make_inputs(seed, shape, device)
        expected = reference_on(pristine)
        result = compare(out, expected, task.dtype, **tol)
        outcome.records.append(CorrectnessRecord(
            shape=shape, seed=seed, passed=result.passed, max_abs_err=result.max_abs_err,
            max_rel_err=result.max_rel_err, failed_check=result.failed_check, message=result.message))
        if not result.passed or trial > 0 or not settings.extra_checks:
            continue
        raw, at_return = _call_candidate(candidate, inputs, reference_cls, f"{where}, again", outcome)
        again = _settled(raw, at_return, device, f"{where}, again", outcome)
        if not compare(again, expected, task.dtype, **tol).passed:
            outcome.evidence.append(("nondeterministic_output",
                                     f"shape {shape}, seed {seed}: a second call on the same inputs is wrong"))
        _probe_caching(task, candidate, reference_on, inputs, expected, shape, seed, device, tol, outcome)


def _probe_caching(task: Task, candidate: Any, reference_on: Any, inputs: list[Any], previous: Any, shape: str,
                   seed: int, device: torch.device, tol: dict[str, float], outcome: CorrectnessOutcome) -> None:
    fresh_seed = seed + 500
    fresh = task.make_inputs(fresh_seed, shape, device)
    for buffer, value in zip(inputs, fresh, strict=True):
        if isinstance(buffer, torch.Tensor):
            buffer.copy_(value)
    where = f"shape {shape}, refilled buffers"
    raw, at_return = _call_candidate(candidate, inputs, task.module.Model, where, outcome)
    out = _settled(raw, at_return, device, where, outcome)
    expected = reference_on(fresh)
    check = compare(out, expected, task.dtype, **tol)
    if check.passed:
        return
    if compare(out, previous, task.dtype, **tol).passed:
        outcome.evidence.append(("result_caching", f"shape {shape}: new contents in the same buffers "
                                                   f"(seed {fresh_seed}) returned the result for seed {seed}"))
    else:
        outcome.records.append(CorrectnessRecord(
            shape=shape, seed=fresh_seed, passed=False, max_abs_err=check.max_abs_err,
            max_rel_err=check.max_rel_err, failed_check=check.failed_check,
            message="in reused input buffers: " + check.message))


# The harness as it was before any candidate ran: this module is imported by the pipeline before a
# candidate executes, so these identities are trustworthy. Checked after every candidate call, which
# also catches a patch the candidate removes again before the pipeline's final look.
_HARNESS = TamperSnapshot.take()
