"""Hidden shapes: variants of a task the candidate cannot know in advance, derived per evaluation.

From the shape the job checks first (the base: `cpu` on the CPU backend, else `default`), on the
sizes that scale: for a task with declared variants, the sizes they change (`Task.scaling_sizes`);
for one without (KernelBench's own files: module-level constants, one fixed shape), the integer
module constants `get_inputs`/`get_init_inputs` read (`source_sizes`: at least 8, not a kernel
size, stride, padding, dilation, group, axis or head count):

- one **prime** shape: every scaling size replaced by a prime between half the base's and the
  base's (a size whose declared values share a factor, say 16 for a head dimension, keeps it: a
  multiple of it in that range instead);
- **large** shapes: one scaling size at a time (up to `MAX_LARGE` of them, chosen at random)
  2-4x the base's, rounded to the same shared factor, the other scaling sizes shrunk by as much
  between them, so that a hidden shape costs about what the base does. Without declared variants
  only the sizes that tile (multiples of `TILE_MIN`) grow, in multiples of their power of two up to
  `TILE_MAX`;
- one **independent** shape: every size that tiles grown by its own factor in `INDEPENDENT_GROWTH`,
  none shrunk, so no product of sizes stays what the base had (a GEMM that computed a fixed budget
  of K x N, dropping the rest, passed every shape whose sizes traded off against each other).

The draws come from the evaluation's secret base seed (recorded in the verdict's provenance once it
is written, so a verdict can be replayed). A derived shape the reference cannot run (sizes that
must divide each other), one that costs more than `COST_FACTOR` times the base's bytes, or one that
would not fit in the device's memory is redrawn, then dropped, and the plan says why: constants
tied together (channels and groups, a width and its head count) keep a task working, at the cost of
that variant.

Imports only the standard library and torch.
"""

from __future__ import annotations

import ast
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from agentforge.task import Task, _device_memory

MAX_LARGE = 3
COST_FACTOR = 4.5  # a hidden shape's bytes (inputs, weights, outputs) over the base's
INDEPENDENT_GROWTH = (1.15, 1.6)  # each size's own factor in the independent shape
MEMORY_SHARE = 0.25  # of the free memory, for one call's bytes times the copies a check holds
COPIES = 6  # inputs and outputs: the judge's, the worker's, the fp64 reference's (twice the bytes), eager's
DRAWS = 4  # tries per derived shape before it is dropped
META_BUDGET_S = 5.0
# Tasks without declared variants: the module constants get_inputs/get_init_inputs read are the sizes.
SOURCE_FUNCTIONS = ("get_inputs", "get_init_inputs")
MIN_SOURCE_SIZE = 8
HYPERPARAMETER = re.compile(r"kernel|stride|pad|dilation|group|axis|head", re.IGNORECASE)
TILE_MIN = 8  # a size that is a multiple of this tiles: it gets 2-4x draws
TILE_MAX = 16


@dataclass(frozen=True)
class HiddenShape:
    name: str
    kind: str  # prime | large | independent
    overrides: dict[str, Any]  # what the task's module globals are set to (the base's overrides included)
    changed: dict[str, int]  # the sizes that differ from the base

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.changed.items())


@dataclass
class HiddenPlan:
    base: str
    shapes: list[HiddenShape] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # why a derived shape was not kept
    reason: str = ""  # why there are none at all
    origin: str = ""  # which sizes were varied, and where they were found


def plan(task: Task, base: str, seed: int, device: torch.device) -> HiddenPlan:
    """The hidden shapes of one evaluation (registered on `task` as derived variants)."""
    result = HiddenPlan(base)
    base_sizes = task.sizes(base)
    if task.shapes.keys() - {"default"}:
        scaling = task.scaling_sizes()
        dims = [d for d in scaling if type(base_sizes.get(d)) is int]
        if not dims:
            result.reason = "no size differs between the task's declared shape variants"
            return result
        steps = {d: math.gcd(*scaling[d]) for d in dims}
        prime_steps, large_dims = steps, dims
        result.origin = "the sizes the declared shape variants change: " + ", ".join(dims)
    else:
        found = source_sizes(task, base)
        dims = list(found)
        if not dims:
            result.reason = ("the task declares no shape variants, and get_inputs/get_init_inputs read no "
                             f"integer module constant of at least {MIN_SOURCE_SIZE} (sizes fixed inside them)")
            return result
        steps = {d: _tile(v) for d, v in found.items()}
        prime_steps = dict.fromkeys(dims, 1)  # every size a prime, a tile or not
        large_dims = [d for d in dims if steps[d] >= TILE_MIN]
        result.origin = ("the module constants get_inputs/get_init_inputs read (no declared variants): "
                         + ", ".join(f"{d}={v}" for d, v in found.items()))
    base_cost = _cost(task, base)
    free = _device_memory(str(device)).get("free_bytes")
    rng = random.Random(f"agentforge-hidden-shapes:{seed}")
    base_overrides = dict(task.shapes.get(base, {}))
    taken = {tuple(sorted(task.sizes(s).items(), key=lambda kv: kv[0])) for s in task.shapes if _sizeable(task, s)}

    def attempt(kind: str, draw: Any) -> None:
        name = f"hidden-{len(result.shapes) + 1}"
        why = ""
        for _ in range(DRAWS):
            changed = {d: v for d, v in draw().items() if v != base_sizes[d]}
            if not changed:
                why = "no size could change"
                continue
            overrides = {**base_overrides, **changed}
            key = tuple(sorted({**base_sizes, **changed}.items(), key=lambda kv: kv[0]))
            if key in taken:
                why = "it is a declared shape"
                continue
            candidate = HiddenShape(name, kind, overrides, changed)
            why = _unfit(task, candidate, base_cost, free)
            if not why:
                taken.add(key)
                task.add_derived_shape(name, overrides)
                result.shapes.append(candidate)
                return
        result.dropped.append(f"{kind} shape dropped: {why}")

    def prime_draw() -> dict[str, int]:
        return {d: _near(rng, base_sizes[d], prime_steps[d], 0.5, 1.0, prime=True) for d in dims}

    def large_draw(d: str) -> dict[str, int]:
        value = _near(rng, base_sizes[d], steps[d], 2.0, 4.0, prime=False)
        others = [o for o in dims if o != d]
        shrink = (base_sizes[d] / value) ** (1 / len(others)) if others else 1.0
        return {d: value, **{o: _shrunk(base_sizes[o], steps[o], shrink) for o in others}}

    def independent_draw() -> dict[str, int]:
        low, high = INDEPENDENT_GROWTH
        return {d: _near(rng, base_sizes[d], steps[d], low, high, prime=False) for d in large_dims}

    attempt("prime", prime_draw)
    for d in rng.sample(large_dims, min(MAX_LARGE, len(large_dims))):
        attempt("large", lambda d=d: large_draw(d))
    if len(large_dims) > 1:
        attempt("independent", independent_draw)
    return result


def source_sizes(task: Task, base: str = "default") -> dict[str, int]:
    """The sizes of a task that declares no shape variants (KernelBench's own files): the integer
    module constants that `get_inputs` and `get_init_inputs` read, at least `MIN_SOURCE_SIZE`
    (a 3 is a kernel size, a 1 a reduction axis) and not named like a layer's hyperparameter
    (`HYPERPARAMETER`), with their values at `base`, in the order the source names them."""
    try:
        tree = ast.parse(task.source)
    except SyntaxError:
        return {}
    read: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in SOURCE_FUNCTIONS:
            local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} | {
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            read += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                     and n.id not in local and n.id not in read]
    sizes = task.sizes(base)
    return {n: sizes[n] for n in read if type(sizes.get(n)) is int and sizes[n] >= MIN_SOURCE_SIZE
            and not HYPERPARAMETER.search(n)}


def _tile(value: int) -> int:
    """The power of two a size is a multiple of, at most `TILE_MAX`: what a 2-4x draw keeps."""
    return min(value & -value, TILE_MAX)


def _shrunk(base: int, step: int, by: float) -> int:
    """`base` times `by`, a multiple of `step`, at least `step` (or 1)."""
    return max(step, round(base * by / step) * step)


def _near(rng: random.Random, base: int, step: int, low: float, high: float, prime: bool) -> int:
    """A size in [low, high] x base: a prime when `step` is 1 and `prime` is asked, else a multiple of
    `step`; at least 2 (a size of 1 broadcasts, and is what small variants already check)."""
    lo, hi = max(2, math.floor(low * base)), max(3, math.ceil(high * base))
    if step > 1:
        lo, hi = max(step, -(-lo // step) * step), max(step, hi // step * step)
        return rng.randrange(lo, hi + 1, step) if hi > lo else lo
    if prime:
        for _ in range(64):
            value = rng.randint(lo, hi)
            if _is_prime(value):
                return value
        value = hi
        while not _is_prime(value):
            value += 1
        return value
    return rng.randint(lo, hi)


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    return all(n % f for f in range(3, math.isqrt(n) + 1, 2))


def _sizeable(task: Task, shape: str) -> bool:
    try:
        task.sizes(shape)
    except KeyError:
        return False
    return True


def _cost(task: Task, shape: str) -> tuple[float | None, bool]:
    """Bytes of one call on the meta device (inputs, weights, and the outputs when the forward runs
    there), and whether it ran; (None, False) when the task cannot even be built at that shape."""
    try:
        found = task.footprint(shape, forward_budget_s=META_BUDGET_S)
    except Exception:
        return None, False
    total = float(found["inputs"] or 0) + float(found["params"] or 0) + float(found["outputs"] or 0)
    return total, found.get("outputs") is not None


def _unfit(task: Task, shape: HiddenShape, base: tuple[float | None, bool], free: float | None) -> str:
    """Why a derived shape cannot be used ('' when it can): the reference's constructor or forward
    fails on it (on the meta device: nothing is allocated), or it is too large."""
    task.add_derived_shape(shape.name, shape.overrides)
    try:
        cost, ran = _cost(task, shape.name)
    finally:
        task.remove_derived_shape(shape.name)
    base_cost, base_ran = base
    if cost is None or (base_ran and not ran):
        return f"the reference does not run at {shape.describe()}"
    if base_cost and cost > COST_FACTOR * base_cost:
        return f"{shape.describe()} is {cost / base_cost:.1f}x the base's bytes"
    if free is not None and cost * COPIES > MEMORY_SHARE * free:
        return f"{shape.describe()} needs {cost * COPIES / 2**30:.1f} GiB"
    return ""


def summary(hidden: HiddenPlan, results: dict[str, str], why: dict[str, str] | None = None) -> dict[str, Any]:
    """What the verdict says of the hidden shapes: which sizes were varied, how many ran, which failed
    and at what sizes (revealed only once the checks are over) with what went wrong (`why`), and why
    any were skipped."""
    ran = [s for s in hidden.shapes if s.name in results and results[s.name] in ("passed", "failed")]
    return {
        "base": hidden.base,
        "origin": hidden.origin,
        "ran": len(ran),
        "failed": {s.name: s.describe() for s in ran if results[s.name] == "failed"},
        "passed": {s.name: s.describe() for s in ran if results[s.name] == "passed"},
        "why_failed": {k: v[:300] for k, v in (why or {}).items()},
        "skipped": {s.name: results.get(s.name, "not run") for s in hidden.shapes if s not in ran}
        | ({"all": hidden.reason} if hidden.reason else {}),
        "dropped": list(hidden.dropped),
    }
