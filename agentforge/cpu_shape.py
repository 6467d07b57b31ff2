"""A CPU-sized shape for a problem that declares none (KernelBench's files), derived from its sizes.

The CPU backend checks and times a task's `cpu` variant, sized so that eager takes a few
milliseconds on one core. KernelBench's problems declare only their GPU-sized globals (level 1's
ReLU: 4096 x 393216, 12 GiB of fp32 per call). For such a file the task probe derives the variant:
the file's large sizes divided by 2, 4, 8... (`shrink.shrink_steps`, as the audit does) until one
call's estimated cost, on the meta device (nothing computed or allocated), comes nearest to what
the shipped `cpu` variants cost: about `TARGET_BYTES` of tensors or `TARGET_FLOPS` of matmul and
convolution work, whichever binds. The variant names every global the smaller sizes change,
derived ones (`bias_shape`) included; the evaluator gets the file's source with that variant
appended as a `SHAPES` entry, marked as added, and every verdict and command says it ran on it.
Standard library and torch only: it runs in the sandbox's task probe.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from agentforge.shrink import shrink_steps
from agentforge.task import CPU_SHAPE, DEFAULT_SHAPE, Task, meta_ready, time_budget

# What one call of the shipped `cpu` variants costs: 16-32 MiB of tensors for the memory-bound ones
# (level1/relu: 2048 x 2048 fp32 in and out, 32 MiB, about 3 ms eager on one core of the 2-core
# VM); for matmul and convolution work, about 2^27 FLOPs (a few ms of fp32 on one core).
TARGET_BYTES = 32 * 2**20
TARGET_FLOPS = float(2**27)
FORWARD_BUDGET_S = 5.0  # per step: a meta forward that steps through time in Python is cut off
HEADER = "# --- added by agentforge, not in the file: a CPU-sized variant derived from its sizes ---"


@dataclass(frozen=True)
class DerivedShape:
    """The variant, what it changes from the file, and what one call of it is estimated to cost."""

    name: str
    overrides: dict[str, Any]  # every module global the variant sets
    original: dict[str, Any]  # those globals as the file sets them
    divisor: int
    bytes: float
    flops: float | None

    def describe(self) -> str:
        """`batch_size=256 (file: 4096), dim=24576 (file: 393216)`."""
        return ", ".join(f"{k}={v!r} (file: {self.original[k]!r})" for k, v in self.overrides.items())

    def source_suffix(self) -> str:
        """What is appended to the file's source: the variant as its only `SHAPES` entry."""
        return f"\n\n{HEADER}\nSHAPES = {{{self.name!r}: {self.overrides!r}}}\n"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def wants_derived(task: Task) -> bool:
    """A problem that declares no shape variants at all (a KernelBench file)."""
    return not getattr(task.module, "SHAPES", None)


def derive_cpu_shape(task: Task) -> DerivedShape | None:
    """The `cpu` variant of a problem that declares no variants; None when it declares some, when
    its own sizes already cost no more than the target, or when no smaller copy can be sized."""
    if not wants_derived(task):
        return None
    cost = call_cost(task)
    if cost is None or _ratio(*cost) <= 1.0:
        return None
    best: tuple[float, Task, int, tuple[float, float | None]] | None = None
    for step in shrink_steps(task):
        cost = call_cost(step.task)
        if cost is None:
            break
        distance = abs(math.log(_ratio(*cost)))
        if best is None or distance < best[0]:
            best = (distance, step.task, step.divisor, cost)
        if _ratio(*cost) <= 1.0:
            break  # smaller steps only move further away
    if best is None:
        return None
    _, copy, divisor, (nbytes, flops) = best
    overrides = _changed_globals(task, copy)
    if not overrides:
        return None
    derived = DerivedShape(CPU_SHAPE, overrides, {k: vars(task.module)[k] for k in overrides}, divisor,
                           nbytes, flops)
    return derived if _same_call(copy, task.source + derived.source_suffix()) else None


def call_cost(task: Task, shape: str = DEFAULT_SHAPE) -> tuple[float, float | None] | None:
    """(bytes of inputs, parameters and outputs; FLOPs of its matmuls and convolutions) of one call,
    on the meta device; None when it cannot be sized there."""
    try:
        sizes = task.footprint(shape, forward_budget_s=FORWARD_BUDGET_S)
    except Exception:
        return None
    outputs = sizes["outputs"] if sizes["outputs"] is not None else sizes["inputs"]
    return float(sizes["inputs"] + sizes["params"] + outputs), _flops(task, shape)


def _flops(task: Task, shape: str) -> float | None:
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with task.shape_variant(shape), torch.device("meta"), torch.no_grad():
            inputs = [x.to(task.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                      for x in task.module.get_inputs()]
            model = task.instantiate_on_meta(shape).to(device="meta", dtype=task.dtype)
            counter = FlopCounterMode(display=False)
            meta_ready()
            with counter, time_budget(FORWARD_BUDGET_S):
                model(*inputs)
    except Exception:
        return None
    return float(counter.get_total_flops())


def _ratio(nbytes: float, flops: float | None) -> float:
    return max(nbytes / TARGET_BYTES, (flops or 0.0) / TARGET_FLOPS)


def _changed_globals(task: Task, copy: Task) -> dict[str, Any]:
    """The module globals (numbers and tuples of them) whose values differ in the copy."""
    mine, theirs = task.sizes(DEFAULT_SHAPE), copy.sizes(DEFAULT_SHAPE)
    return {k: v for k, v in theirs.items() if k in mine and mine[k] != v}


def _same_call(copy: Task, appended: str) -> bool:
    """The file with the variant appended, run on it, gives the copy's inputs and outputs: no
    global the sizes feed was missed."""
    try:
        with_variant = Task(copy.name, appended, copy.path)
        return copy.footprint(DEFAULT_SHAPE) == with_variant.footprint(CPU_SHAPE)
    except Exception:
        return False
