"""The sanctioned way to prepack or fold weights: `ModelNew.prepare_weights()`.

The evaluator builds `ModelNew(*init)` and then loads the reference's weights into it with
`load_state_dict`, so a copy of a weight made in `__init__` (transposed, repacked, folded) is stale
by the first call. A candidate that defines `prepare_weights(self)` has it called once the weights
are loaded, before any input exists: the worker calls it after every construct (`candidate_side`),
outside every candidate call and timed window, as `__init__` is. It sees what `__init__` sees plus
the loaded weights (which the worker holds anyway), never an input, so nothing it computes can be
an output; torch may run there (a transpose, a fold of two layers), as it may in `__init__`.

Prepacking inside `forward` instead (once per weight version) is still PyTorch dispatched inside the
call: `torch_fallback`, with evidence that names the weights and this hook (`WeightOpRecorder`).
An operator on weights alone cannot be told from one on input data that native code copied into a
weight, or one scaled by a Python number read from an input, so the exemption is not made there.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from agentforge.evaluator.guards import NON_COMPUTE_OPS, OpRecorder

HOOK = "prepare_weights"


def prepare(model: Any) -> None:
    """Call `model.prepare_weights()` if its class defines one (no arguments, no gradients)."""
    hook = getattr(type(model), HOOK, None)
    if hook is None:
        return
    if not callable(hook):
        raise TypeError(f"ModelNew.{HOOK} must be a method taking no arguments (it is a {type(hook).__name__})")
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        getattr(model, HOOK)()


def weight_storages(model: Any) -> Spans:
    """The byte spans of `model`'s parameters' and buffers' storages (views of them lie inside)."""
    if not isinstance(model, torch.nn.Module):
        return Spans(())
    return Spans(t for t in [*model.parameters(), *model.buffers()])


class Spans:
    """Storage byte spans [start, end) of some tensors; `holds(t)`: whether t's data lies in one."""

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        spans = sorted({_span(t) for t in tensors if isinstance(t, torch.Tensor)} - {None})
        self.starts = [start for start, _ in spans]
        self.ends = [end for _, end in spans]

    def __bool__(self) -> bool:
        return bool(self.starts)

    def holds(self, t: torch.Tensor) -> bool:
        if not self.starts:
            return False
        try:
            ptr = t.data_ptr()
        except Exception:  # a tensor with no storage (a subclass, meta) is in no span
            return False
        i = bisect.bisect_right(self.starts, ptr) - 1
        return i >= 0 and ptr < self.ends[i]


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        storage = t.untyped_storage()
        start = storage.data_ptr()
    except Exception:
        return None
    return (start, start + storage.nbytes()) if start and storage.nbytes() else None


class WeightOpRecorder(OpRecorder):
    """`OpRecorder`, and per call the compute operators that read or write the model's weights (or
    views of them) and touch no input: prepacking inside forward, named in the evidence."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = Spans(())
        self.inputs = Spans(())
        self.on_weights: dict[str, int] = {}

    def watch(self, weights: Spans, inputs: list[Any]) -> None:
        """Start a call: these weights, these inputs, no operator seen yet."""
        self.weights, self.inputs, self.on_weights = weights, Spans(inputs), {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if self.weights and name not in NON_COMPUTE_OPS:
            tensors = list(_tensors(args, kwargs))
            if any(self.weights.holds(t) for t in tensors) and not any(self.inputs.holds(t) for t in tensors):
                self.on_weights[name] = self.on_weights.get(name, 0) + 1
        return super().__torch_dispatch__(func, types, args, kwargs)


def _tensors(args: Any, kwargs: Any) -> Iterator[torch.Tensor]:
    """The tensor arguments of an aten call (one level of lists, as aten schemas nest them)."""
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def evidence(on_weights: dict[str, int], where: str) -> list[list[str]]:
    """`torch_fallback` evidence for PyTorch run on the weights alone inside a call."""
    if not on_weights:
        return []
    listed = ", ".join(f"{op} x{n}" for op, n in sorted(on_weights.items(), key=lambda kv: -kv[1])[:6])
    return [["torch_fallback", f"{where}: PyTorch ran on ModelNew's weights inside forward ({listed}): to "
                               f"prepack or fold weights, do it in ModelNew.{HOOK}(self), which the evaluator "
                               "calls once the weights are loaded, outside the checked and timed calls"]]
