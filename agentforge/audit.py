"""The task audit: find problems that a wrong kernel could pass, by running the reference on the CPU.

A task is degenerate when a kernel that does not compute the operator can still match it:

- `nonfinite`: the reference output holds NaN or Inf (allclose then says little);
- `constant`: the output barely changes across seeds (a kernel can return a stored tensor);
- `tiny`: the output is within tolerance of zero (a kernel can return zeros);
- `identity`: an output is within tolerance of one of the inputs (a kernel can return its
  input: KernelBench's ReLU on `torch.rand` inputs, which are all positive);
- `ignores-input` / `ignores-param`: perturbing one input or one parameter leaves the output
  within tolerance (a kernel can skip it).

Each check compares with the task's own tolerance, on its cheapest shape variant. Sizes are
estimated on the meta device, without allocating. A problem with no variants (KernelBench's)
that exceeds the size budget is checked on a copy with its large sizes halved until it fits
(shape `default/8` means: divided by 8); one that cannot be shrunk is skipped with a note.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentforge.evaluator.models import set_mode
from agentforge.shrink import shrink_steps
from agentforge.task import (
    DEFAULT_SHAPE,
    Task,
    TaskLoadError,
    Tolerance,
    flatten_tensors,
    load_task,
    task_name_for,
)

#: Elements (inputs, parameters, buffers and outputs) above which the audit does not run a task:
#: about 64 MiB in fp32, so that intermediates of a few times that stay well within a laptop.
DEFAULT_NUMEL_BUDGET = 1 << 24
#: A shrunk problem aims this many times under the budget, so that its compute shrinks too.
_SHRINK_MARGIN = 64
#: The audit runs a few forwards plus one per parameter; a reference slower than this is skipped.
_SECONDS_PER_FORWARD = 2.0
#: After this, the per-parameter checks stop (noted in the report).
_SECONDS_PER_TASK = 20.0
#: Buffers that do not feed the output of a module in eval mode.
_INERT_BUFFERS = ("num_batches_tracked",)
_SEEDS = (0, 1)


class _TooSlow(Exception):
    pass


@dataclass(frozen=True)
class Finding:
    check: str
    detail: str


@dataclass(frozen=True)
class AuditReport:
    """What the audit found for one task file."""

    task: str
    shape: str | None = None
    findings: tuple[Finding, ...] = ()
    skipped: str | None = None
    seconds: float = 0.0
    checked: tuple[str, ...] = field(default=())
    note: str | None = None  # e.g. that the time budget cut the per-parameter checks short

    @property
    def ok(self) -> bool:
        return not self.findings and self.skipped is None

    @property
    def status(self) -> str:
        if self.findings:
            return "flagged"
        return "skipped" if self.skipped else "ok"


def audit_paths(paths: Iterable[Path], numel_budget: int = DEFAULT_NUMEL_BUDGET) -> Iterator[AuditReport]:
    """Audit each file in turn; a file that does not load is reported with a `load` finding."""
    for path in paths:
        try:
            task = load_task(path)
        except TaskLoadError as exc:
            yield AuditReport(task=task_name_for(path), findings=(Finding("load", exc.problem),))
            continue
        yield audit_task(task, numel_budget=numel_budget)


def audit_task(task: Task, shape: str | None = None, numel_budget: int = DEFAULT_NUMEL_BUDGET) -> AuditReport:
    """Run every check on one task: on `shape`, else its smallest variant; a task over the budget
    with no declared variants (a KernelBench problem) is checked on a shrunk copy of itself."""
    start = time.perf_counter()
    label = shape
    try:
        shape = label = shape or task.smallest_shape()
        numel, _ = _meta_numel(task, shape)
        if numel is not None and numel > numel_budget and list(task.shapes) == [DEFAULT_SHAPE]:
            shrunk = _shrunk(task, numel_budget)
            if shrunk is not None:
                task, label, numel = shrunk
        if numel is not None and numel > numel_budget:
            return AuditReport(task.name, label, skipped=f"{numel:,} elements exceed the budget of "
                               f"{numel_budget:,}", seconds=time.perf_counter() - start)
        findings, checked, note = _run_checks(task, shape, deadline=start + _SECONDS_PER_TASK)
    except TaskLoadError as exc:
        findings, checked, note = [Finding("load", exc.problem)], [], None
    except _TooSlow as exc:
        return AuditReport(task.name, label, skipped=str(exc), seconds=time.perf_counter() - start)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        findings, checked, note = [Finding("runs", f"reference fails: {type(exc).__name__}: {first_line}")], [], None
    return AuditReport(task.name, label, tuple(findings), seconds=time.perf_counter() - start,
                       checked=tuple(checked), note=note)


def _shrunk(task: Task, budget: int) -> tuple[Task, str, int] | None:
    """A copy of `task` whose large integer sizes are divided by 2, 4, 8... (`shrink.shrink_steps`)
    until inputs, parameters and outputs fit well under the budget (1/_SHRINK_MARGIN of it, so
    that compute shrinks too), or at least under it. Accepted only if its forward still runs on the
    meta device. Returns (copy, label such as "default/8", elements)."""
    fitting: tuple[Task, str, int] | None = None
    for step in shrink_steps(task):
        numel, outputs = _meta_numel(step.task, DEFAULT_SHAPE)
        if outputs is None or numel is None:
            break
        if numel <= budget:
            fitting = (step.task, f"default/{step.divisor}", numel)
            if numel <= budget // _SHRINK_MARGIN:
                break
    return fitting


def _run_checks(task: Task, shape: str, deadline: float) -> tuple[list[Finding], list[str], str | None]:
    tol = task.tolerance
    model = set_mode(task.make_model(_SEEDS[0], shape))
    inputs = task.make_inputs(_SEEDS[0], shape)
    start = time.perf_counter()
    base = _forward(model, inputs)
    took = time.perf_counter() - start
    if took > _SECONDS_PER_FORWARD:
        raise _TooSlow(f"one forward takes {took:.1f} s (over {_SECONDS_PER_FORWARD} s): too slow to audit")
    findings: list[Finding] = []
    checked = ["nonfinite", "tiny", "identity", "constant", "ignores-input", "ignores-param"]

    bad = [i for i, t in enumerate(base) if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        findings.append(Finding("nonfinite", f"output(s) {bad} hold NaN or Inf"))
        return findings, checked, None
    if not base:
        findings.append(Finding("runs", "forward returns no tensor"))
        return findings, checked, None
    if _close(base, [torch.zeros_like(t) for t in base], tol):
        peak = max(float(t.abs().max()) if t.numel() else 0.0 for t in base)
        findings.append(Finding("tiny", f"zeros would pass: max |output| = {peak:.3g}, "
                                f"atol {tol.atol:g}, rtol {tol.rtol:g}"))

    for o, out in enumerate(base):
        same = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and _close([out], [x], tol)]
        if same:
            findings.append(Finding("identity", f"output {o} equals input {same[0]}: returning it would pass"))

    other = _forward(set_mode(task.make_model(_SEEDS[1], shape)), task.make_inputs(_SEEDS[1], shape))
    if _close(base, other, tol):
        findings.append(Finding("constant", f"output for seed {_SEEDS[1]} matches seed {_SEEDS[0]}"))

    other_inputs = task.make_inputs(_SEEDS[1], shape)
    for i, (mine, theirs) in enumerate(zip(inputs, other_inputs, strict=True)):
        if not isinstance(mine, torch.Tensor) or mine.numel() == 0:
            continue
        swapped = [*inputs[:i], _perturbed(mine, theirs), *inputs[i + 1:]]
        if _close(base, _forward(model, swapped), tol):
            findings.append(Finding("ignores-input", f"output does not move when input {i} changes"))

    state = list(_state(model))
    for done, (name, tensor) in enumerate(state):
        if time.perf_counter() > deadline:
            return findings, checked, f"time budget: checked {done} of {len(state)} parameters and buffers"
        saved = tensor.detach().clone()
        with torch.no_grad():
            tensor.copy_(_perturbed(saved, None))
        moved = not _close(base, _forward(model, inputs), tol)
        with torch.no_grad():
            tensor.copy_(saved)
        if not moved:
            findings.append(Finding("ignores-param", f"output does not move when {name} changes"))
    return findings, checked, None


def _meta_numel(task: Task, shape: str) -> tuple[int | None, int | None]:
    """(elements of inputs, parameters and outputs; elements of outputs) of one call, sized on
    the meta device: the forward runs on meta tensors, so nothing is computed or allocated.
    Outputs are None where the forward cannot run on meta (.item(), nonzero); then only inputs
    and parameters count. Both are None when the task cannot be sized at all."""
    numel = task.input_numel(shape)
    if numel is None:
        return None, None
    try:
        model = task.instantiate_on_meta(shape).to("meta")
        with task.shape_variant(shape), torch.device("meta"):
            inputs = task.module.get_inputs()
        outputs = sum(t.numel() for t in _forward(model, list(inputs)))
    except Exception:
        return numel, None
    return numel + outputs, outputs


def _forward(model: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(*inputs)
    return [t.detach() for t in flatten_tensors(out)]


def _close(a: list[torch.Tensor], b: list[torch.Tensor], tol: Tolerance) -> bool:
    """The evaluator's verdict: every output within atol + rtol * |reference|."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        x64, y64 = x.to(torch.float64), y.to(torch.float64)
        if not torch.allclose(y64, x64, atol=tol.atol, rtol=tol.rtol, equal_nan=False):
            return False
    return True


def _state(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from ((n, p) for n, p in model.named_parameters() if p.numel())
    for name, buf in model.named_buffers():
        if buf.numel() and not name.endswith(_INERT_BUFFERS):
            yield name, buf


def _perturbed(tensor: torch.Tensor, replacement: torch.Tensor | None) -> torch.Tensor:
    """Another value for `tensor` drawn like it: `replacement` (the next seed's draw) when that
    differs, else noise at the tensor's own scale (or fresh integers in its range)."""
    if replacement is not None and not torch.equal(replacement, tensor):
        return replacement
    gen = torch.Generator().manual_seed(1234)
    if tensor.is_floating_point():
        scale = max(float(tensor.float().std()) if tensor.numel() > 1 else 0.0,
                    float(tensor.float().abs().mean()), 0.1)
        noise = torch.randn(tensor.shape, generator=gen) * scale
        return (tensor.float() + noise).to(tensor.dtype)
    if tensor.dtype == torch.bool:
        return ~tensor
    lo, hi = int(tensor.min()), int(tensor.max())
    if lo == hi:
        return tensor + 1
    return torch.randint(lo, hi + 1, tensor.shape, generator=gen, dtype=tensor.dtype)
