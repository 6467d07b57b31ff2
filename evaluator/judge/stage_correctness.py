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

Precision (`tolerance`): on an fp32 task without a declared TOLERANCE (hardened track), each shape's
bar is calibrated from eager fp32's own error against fp64 on its first trial's inputs; on every fp32 task
the same probe flags a candidate whose error is far above eager's (`precision_downgrade`: reject on
the hardened track, an audit mark on the kernelbench track, which keeps its published tolerance).
Hidden shapes (`hidden_shapes`, both tracks): after the declared shapes, a few derived from them
(or, for a task without variants, from the module constants its inputs read) with the secret seed,
one trial each, within a time budget; the verdict's provenance says how many ran, which failed (with
their sizes) and why any were skipped. A failure there is a mismatch with `shape_specialised` on
the hardened track; on the kernelbench track, whose published convention accepts a kernel
specialised to the task's one fixed size, it is an audit mark and the verdict stands.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from agentforge.evaluator import prepack
from agentforge.evaluator.judge import hidden_shapes, tolerance
from agentforge.evaluator.judge.compare import compare, reference_meta_outputs
from agentforge.evaluator.judge.remote import CandidateRaised, RemoteModel, Unsendable, WorkerBroken, WorkerClient
from agentforge.evaluator.models import set_mode, upcast
from agentforge.evaluator.result import CorrectnessRecord

from agentforge.task import Task, flatten_tensors

_perf_counter = time.perf_counter  # bound before any candidate can patch `time`
HIDDEN_MIN_BUDGET_S = 1.0  # hidden shapes may take this long, or half the declared shapes' checks
HIDDEN_SHARE = 0.5
STALE_SEED = 0  # the worker builds ModelNew under this seed before loading the reference's weights
STALE_TRIES = 16  # weights tried one by one as the stale ones, after all of them at once,
STALE_BUDGET_S = 2.0  # while the tries have taken less than this (a failing candidate's verdict waits)


@dataclass(frozen=True)
class CorrectnessSettings:
    trials: int
    base_seed: int
    reference_dtype: torch.dtype
    atol: float
    rtol: float
    extra_checks: bool  # determinism and caching probes (hardened track)
    calibrate: bool = False  # the fp32 bar from eager fp32's error against fp64 (`precision_policy`)
    precision_probe: bool = False  # flag a precision downgrade (fp32 tasks)
    probe_severity: str = "reject"  # audit on the kernelbench track
    hidden_shapes: bool = False  # derived shapes after the declared ones
    hidden_severity: str = "reject"  # a wrong hidden shape: audit on the kernelbench track


@dataclass
class CorrectnessOutcome:
    records: list[CorrectnessRecord] = field(default_factory=list)
    evidence: list[tuple[str, str]] = field(default_factory=list)  # (rule, evidence)
    models: dict[str, tuple[torch.nn.Module, Any]] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)  # the first trial's reference output per shape
    op_counts: dict[str, int] = field(default_factory=dict)  # aten ops the worker saw ModelNew dispatch
    audits: list[tuple[str, str]] = field(default_factory=list)  # (rule, evidence) marked, not rejecting
    notes: dict[str, Any] = field(default_factory=dict)  # for the verdict's provenance: tolerances, hidden shapes
    timing_tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)  # per shape (atol, rtol)
    declared_s: float = 0.0  # wall time of the declared shapes' checks


def precision_policy(task: Task, track: str, atol: float | None, rtol: float | None) -> dict[str, Any]:
    """Which precision rules apply: calibration where the job and the task leave the fp32 tolerance
    to the default, the downgrade probe on every fp32 task, hidden shapes on both tracks (an audit
    mark on the kernelbench track, a rejection on the hardened one)."""
    fp32 = task.dtype == torch.float32
    declared = getattr(task.module, "TOLERANCE", None) is not None or atol is not None or rtol is not None
    kernelbench = track == "kernelbench"
    return {"calibrate": fp32 and not declared and not kernelbench, "precision_probe": fp32,
            "probe_severity": "audit" if kernelbench else "reject", "hidden_shapes": True,
            "hidden_severity": "audit" if kernelbench else "reject"}


def reference_dtype_for(task_dtype: torch.dtype, track: str, declared: str | None) -> torch.dtype:
    if declared:
        return getattr(torch, declared)
    if track == "kernelbench":
        return task_dtype
    return torch.float32 if task_dtype in (torch.float16, torch.bfloat16) else torch.float64


def build_remote(task: Task, client: WorkerClient, shape: str, seed: int, device: torch.device,
                 ) -> tuple[torch.nn.Module, RemoteModel]:
    """(reference, the worker's ModelNew built with the reference's weights). The worker gets the
    init inputs and the weights, never the seed."""
    reference = set_mode(task.make_model(seed, shape, device))
    candidate = RemoteModel.construct(client, shape, task.init_inputs(shape), reference.state_dict(), device)
    return reference, candidate


class _Judge:
    """The judge's side of one shape: the reference in the reference dtype (what outputs are compared
    with), and for the precision rules eager at the task's dtype and a float64 reference."""

    def __init__(self, reference: torch.nn.Module, settings: CorrectnessSettings, shape: str,
                 outcome: CorrectnessOutcome):
        self.reference, self.settings, self.shape, self.outcome = reference, settings, shape, outcome
        self.hi = copy.deepcopy(reference).to(settings.reference_dtype)
        self.probing = settings.calibrate or settings.precision_probe
        self.f64: torch.nn.Module | None = None
        if self.probing:
            self.f64 = self.hi if settings.reference_dtype == torch.float64 else \
                copy.deepcopy(reference).to(torch.float64)
        self.bars: list[float] = []
        self.eager_errors: list[float] = []
        self.worst: float = 0.0
        self.calibrated: tolerance.Calibrated | None = None

    def expected(self, inputs: list[Any]) -> Any:
        return self.hi(*upcast(inputs, self.settings.reference_dtype))

    def tolerance(self, inputs: list[Any], expected: Any, dtypes: Any, first: bool) -> tuple[dict[str, Any], Any]:
        """The (atol, rtol) for these inputs, and the calibration (with its fp64 reference) when the
        precision rules look at them: on the first trial of each shape (eager's error on its secret
        inputs sets the shape's bar, 16x it leaving room for other inputs; every pass over the
        outputs in float64 costs as much as the comparison itself)."""
        fixed = dict(atol=self.settings.atol, rtol=self.settings.rtol, dtypes=dtypes)
        if not self.probing or self.f64 is None:
            return fixed, None
        if not first:
            calibrated = self.calibrated
            if calibrated is None or not self.settings.calibrate:
                return fixed, None
            return dict(atol=calibrated.atols, rtol=calibrated.rtol, dtypes=dtypes), None
        ref64 = expected if self.f64 is self.hi else self.f64(*upcast(inputs, torch.float64))
        calibrated = self.calibrated = tolerance.calibrate(self.reference(*inputs), ref64)
        self.eager_errors.append(calibrated.eager_error)
        if not self.settings.calibrate:
            return fixed, (calibrated, ref64)
        self.bars.append(calibrated.bar)
        return dict(atol=calibrated.atols, rtol=calibrated.rtol, dtypes=dtypes), (calibrated, ref64)

    def probe(self, out: Any, probed: Any, where: str) -> None:
        """A candidate error far above eager fp32's is a precision downgrade."""
        if probed is None or not self.settings.precision_probe:
            return
        calibrated, ref64 = probed
        error = tolerance.scaled_error(out, ref64, calibrated.scales)
        if error != float("inf"):
            self.worst = max(self.worst, error)
        if tolerance.precision_downgrade(error, calibrated.eager_error):
            threshold = tolerance.downgrade_threshold(calibrated.eager_error)
            evidence = (f"{where}: error {error:.2g} against fp64 (|x - r| / (|r| + rms r)), eager fp32's "
                        f"{calibrated.eager_error:.2g}: above {threshold:.2g}")
            target = self.outcome.audits if self.settings.probe_severity == "audit" else self.outcome.evidence
            target.append(("precision_downgrade", evidence))

    def note(self) -> dict[str, Any]:
        if self.bars:
            kind = {"tolerance": "calibrated", "bar": max(self.bars)}
        else:
            kind = {"tolerance": "fixed", "atol": self.settings.atol, "rtol": self.settings.rtol}
        if self.eager_errors:
            kind |= {"eager_fp32_error": max(self.eager_errors), "candidate_error": self.worst}
        return kind


def check_shape(task: Task, client: WorkerClient, shape: str, shape_index: int, device: torch.device,
                settings: CorrectnessSettings, outcome: CorrectnessOutcome) -> None:
    """The trials of one shape: inputs made here from secret seeds, outputs checked here against a
    reference only this process holds. The worker sees input tensors, nothing else."""
    started = _perf_counter()
    reference, candidate = build_remote(task, client, shape, settings.base_seed, device)
    judge = _Judge(reference, settings, shape, outcome)
    outcome.models[shape] = (reference, candidate)
    # The output dtypes of a task-precision run of the reference (a bf16 model may return fp32).
    meta_outputs = reference_meta_outputs(reference, task.make_inputs(settings.base_seed, shape, "meta"))
    dtypes = None if meta_outputs is None else tuple(t.dtype for t in flatten_tensors(meta_outputs))
    if meta_outputs is not None:  # a data-dependent reference cannot run on meta: no landing arena
        candidate.expect(meta_outputs)
    loosest: list[tuple[float, float]] = []
    try:
        for trial in range(settings.trials):
            seed = settings.base_seed + 1 + trial + 1000 * shape_index
            inputs = task.make_inputs(seed, shape, device)  # the worker gets a copy: these stay pristine
            where = f"shape {shape}, trial {trial + 1}"
            out, evidence = candidate.watched_call(where, inputs=inputs)
            outcome.evidence += evidence
            outcome.evidence += _output_types(out, where)
            expected = judge.expected(inputs)
            outcome.expected.setdefault(shape, expected)
            tol, probed = judge.tolerance(inputs, expected, dtypes, first=trial == 0)
            if probed is not None and settings.calibrate:
                loosest.append(probed[0].loosest())
            result = compare(out, expected, task.dtype, **tol)
            judge.probe(out, probed, where)
            if not result.passed and trial == 0:
                result = _stale_weights(task, shape, device, judge, inputs, out, tol, result, where, outcome)
            outcome.records.append(CorrectnessRecord(
                shape=shape, seed=seed, passed=result.passed, max_abs_err=result.max_abs_err,
                max_rel_err=result.max_rel_err, failed_check=result.failed_check, message=result.message))
            if not result.passed or trial > 0 or not settings.extra_checks:
                continue
            again, evidence = candidate.watched_call(f"{where}, again")
            outcome.evidence += evidence
            if not compare(again, expected, task.dtype, **tol).passed:
                outcome.evidence.append(("nondeterministic_output", f"shape {shape}, trial {trial + 1}: "
                                         "a second call on the same inputs is wrong"))
            _probe_caching(task, candidate, judge, expected, shape, seed, device, dtypes, outcome)
    finally:
        outcome.notes.setdefault("precision", {})[shape] = judge.note()
        outcome.timing_tolerance[shape] = (max(a for a, _ in loosest), max(r for _, r in loosest)) if loosest \
            else (settings.atol, settings.rtol)
        outcome.declared_s += _perf_counter() - started


def check_hidden_shapes(task: Task, client: WorkerClient, declared: list[str], device: torch.device,
                        settings: CorrectnessSettings, outcome: CorrectnessOutcome) -> None:
    """After the declared shapes passed: the hidden ones, one trial each, within the time budget
    (`HIDDEN_MIN_BUDGET_S`, or `HIDDEN_SHARE` of the declared shapes' time). A candidate that raises
    on one fails it; a reference that cannot run it skips it. Nothing is said of them to the worker
    but their inputs, when they are called. A failure rejects (a failed record and the rule's
    evidence), or with `hidden_severity` audit marks: no failed record, the verdict stands."""
    if not settings.hidden_shapes:
        outcome.notes["hidden_shapes"] = {"ran": 0, "skipped": {"all": "hidden shapes are off for this job"}}
        return
    if not declared or any(not r.passed for r in outcome.records):
        outcome.notes["hidden_shapes"] = {"ran": 0, "skipped": {"all": "a declared shape failed"}}
        return
    plan = hidden_shapes.plan(task, declared[0], settings.base_seed, device)
    results: dict[str, str] = {}
    why: dict[str, str] = {}
    budget = max(HIDDEN_MIN_BUDGET_S, HIDDEN_SHARE * outcome.declared_s)
    started = _perf_counter()
    try:
        for index, hidden in enumerate(plan.shapes):
            if _perf_counter() - started > budget:
                results[hidden.name] = f"time budget ({budget:.1f} s) spent"
                continue
            results[hidden.name] = _check_hidden(task, client, hidden, index, device, settings, outcome, why)
    finally:
        for hidden in plan.shapes:
            task.remove_derived_shape(hidden.name)
        outcome.notes["hidden_shapes"] = hidden_shapes.summary(plan, results, why) | {
            "seconds": round(_perf_counter() - started, 3), "severity": settings.hidden_severity}
    failed = [s for s in plan.shapes if results.get(s.name) == "failed"]
    if failed:
        target = outcome.audits if settings.hidden_severity == "audit" else outcome.evidence
        target.append(("shape_specialised", "right on the declared shapes " + ", ".join(declared)
                       + ", wrong on shapes drawn for this evaluation: "
                       + "; ".join(f"{s.name} ({s.describe()})" for s in failed)
                       + ": the kernel assumes a size only the declared shapes have (a constant, a tile, a bound); "
                       "make it right for any size the task's inputs allow"))


def _check_hidden(task: Task, client: WorkerClient, hidden: hidden_shapes.HiddenShape, index: int,
                  device: torch.device, settings: CorrectnessSettings, outcome: CorrectnessOutcome,
                  why: dict[str, str]) -> str:
    """One trial on one hidden shape: 'passed', 'failed' (what went wrong in `why`), or why it was
    skipped (the task's own failure at a derived size: its reference or its inputs do not build)."""
    name = hidden.name
    seed = settings.base_seed + 1 + 1000 * (100 + index)

    def failed(check: str | None, message: str, result: Any = None) -> str:
        why[name] = f"{check}: {message}"
        if settings.hidden_severity != "audit":  # an audit mark leaves no failed record behind
            _hidden_failure(outcome, hidden, seed, check, message, result)
        return "failed"

    try:
        reference, candidate = build_remote(task, client, name, settings.base_seed, device)
    except CandidateRaised as exc:
        return failed("exception", f"ModelNew(...) raised {exc.record.type}: {exc.record.message[:300]}")
    except WorkerBroken:
        raise
    except Exception as exc:
        return f"the reference or its init inputs do not build ({type(exc).__name__})"
    try:
        judge = _Judge(reference, settings, name, outcome)
        try:
            meta_outputs = reference_meta_outputs(reference, task.make_inputs(seed, name, "meta"))
            inputs = task.make_inputs(seed, name, device)
        except Exception as exc:
            return f"the inputs do not build ({type(exc).__name__})"
        dtypes = None if meta_outputs is None else tuple(t.dtype for t in flatten_tensors(meta_outputs))
        if meta_outputs is not None:
            candidate.expect(meta_outputs)
        where = f"shape {name}"
        try:
            out, evidence = candidate.watched_call(where, inputs=inputs)
        except CandidateRaised as exc:
            return failed("exception", f"forward raised {exc.record.type}: {exc.record.message[:300]}")
        outcome.evidence += evidence
        outcome.evidence += _output_types(out, where)
        try:
            expected = judge.expected(inputs)
            tol, probed = judge.tolerance(inputs, expected, dtypes, first=True)
        except Exception as exc:  # the task's own failure at a derived size: not the candidate's
            return f"the reference raised {type(exc).__name__}"
        result = compare(out, expected, task.dtype, **tol)
        judge.probe(out, probed, where)
        if not result.passed:
            return failed(result.failed_check, result.message, result)
        outcome.records.append(CorrectnessRecord(shape=name, seed=seed, passed=True, max_abs_err=result.max_abs_err,
                                                 max_rel_err=result.max_rel_err))
        return "passed"
    finally:
        candidate.close()


def _hidden_failure(outcome: CorrectnessOutcome, hidden: hidden_shapes.HiddenShape, seed: int, check: str | None,
                    message: str, result: Any = None) -> None:
    outcome.records.append(CorrectnessRecord(
        shape=hidden.name, seed=seed, passed=False, max_abs_err=getattr(result, "max_abs_err", None),
        max_rel_err=getattr(result, "max_rel_err", None), failed_check=check,
        message=f"hidden shape ({hidden.kind}: {hidden.describe()}): {message}"[:2000]))


def _stale_weights(task: Task, shape: str, device: torch.device, judge: _Judge, inputs: list[Any], out: Any,
                   tol: dict[str, Any], result: Any, where: str, outcome: CorrectnessOutcome) -> Any:
    """A wrong first trial that is right once some weights hold the values `ModelNew(*init)` drew itself
    (the worker builds it under seed 0, as `Task.make_model(0)` builds the reference) computes from a
    copy made before the evaluator loaded the weights: say so, naming them, in the record and as
    `stale_weights`. All such weights at once, then each alone (the first `STALE_TRIES`, within
    `STALE_BUDGET_S`)."""
    try:
        own = task.make_model(STALE_SEED, shape, device).state_dict()
        names = [k for k, v in judge.hi.state_dict().items() if k in own and v.is_floating_point()
                 and own[k].shape == v.shape and not torch.equal(own[k].to(v.dtype), v)]
        tries = [names] + ([[k] for k in names[:STALE_TRIES]] if len(names) > 1 else [])
        started = _perf_counter()
        stale = next((group for i, group in enumerate(tries) if group
                      and (i == 0 or _perf_counter() - started < STALE_BUDGET_S)
                      and _right_with(judge, own, group, inputs, out, tol, task)), None)
    except Exception:  # the task's own failure here is no diagnosis; the mismatch stands as it is
        return result
    if stale is None:
        return result
    which = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
    verb = "holds" if len(stale) == 1 else "hold"
    cause = (f"{where}: the output is right when {which} {verb} the values ModelNew(...) drew itself, and wrong "
             "with the weights the evaluator loaded into it (load_state_dict): a copy made in __init__ "
             f"(prepacked, transposed, folded) is stale; make it in ModelNew.{prepack.HOOK}(self), which the "
             "evaluator calls once the weights are loaded")
    outcome.evidence.append(("stale_weights", cause))
    return replace(result, message=f"stale weights ({which}): {result.message}")


def _right_with(judge: _Judge, own: dict[str, torch.Tensor], names: list[str], inputs: list[Any], out: Any,
                tol: dict[str, Any], task: Task) -> bool:
    """Whether `out` matches the reference with `names` set to the candidate's own initial values."""
    model = copy.deepcopy(judge.hi)
    state = model.state_dict()
    with torch.no_grad():
        for name in names:
            state[name].copy_(own[name])
        expected = model(*upcast(inputs, judge.settings.reference_dtype))
    return compare(out, expected, task.dtype, **tol).passed


def _output_types(out: Any, where: str) -> list[tuple[str, str]]:
    outputs = list(out) if isinstance(out, list | tuple) else [out]
    return [("output_type", f"{where}: output {i} is {_type_name(o)}, not a torch.Tensor")
            for i, o in enumerate(outputs) if not isinstance(o, torch.Tensor)]


def _type_name(value: Any) -> str:
    return value.type_name if isinstance(value, Unsendable) else type(value).__name__


def _probe_caching(task: Task, candidate: RemoteModel, judge: _Judge, previous: Any, shape: str, seed: int,
                   device: torch.device, dtypes: Any, outcome: CorrectnessOutcome) -> None:
    """New contents written into the same input buffers: a result cached by pointer is wrong."""
    fresh_seed = seed + 500
    fresh = task.make_inputs(fresh_seed, shape, device)
    out, evidence = candidate.watched_call(f"shape {shape}, refilled buffers", refill=fresh)
    outcome.evidence += evidence
    expected = judge.expected(fresh)
    tol, _ = judge.tolerance(fresh, expected, dtypes, first=False)
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
