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

from typing import Any

import torch
from agentforge.evaluator.guards import NON_COMPUTE_OPS, OpRecorder
from torch.utils._pytree import tree_leaves

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


def weight_storages(model: Any) -> frozenset[int]:
    """The storages of `model`'s parameters and buffers (views of them share these)."""
    if not isinstance(model, torch.nn.Module):
        return frozenset()
    tensors = [*model.parameters(), *model.buffers()]
    return frozenset(t.untyped_storage().data_ptr() for t in tensors if t.numel())


class WeightOpRecorder(OpRecorder):
    """`OpRecorder`, and per call the compute operators that read or write the model's weights (or
    views of them) and touch no input: prepacking inside forward, named in the evidence."""

    def __init__(self) -> None:
        super().__init__()
        self.weights: frozenset[int] = frozenset()
        self.inputs: frozenset[int] = frozenset()
        self.on_weights: dict[str, int] = {}

    def watch(self, weights: frozenset[int], inputs: list[Any]) -> None:
        """Start a call: these weights, these inputs, no operator seen yet."""
        self.weights, self.on_weights = weights, {}
        self.inputs = frozenset(_storage(t) for t in inputs if isinstance(t, torch.Tensor))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if self.weights and name not in NON_COMPUTE_OPS:
            tensors = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
            storages = {_storage(t) for t in tensors}
            if storages & self.weights and not storages & self.inputs:
                self.on_weights[name] = self.on_weights.get(name, 0) + 1
        return super().__torch_dispatch__(func, types, args, kwargs)


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # a tensor with no storage (a subclass, meta) is no weight
        return None


def evidence(on_weights: dict[str, int], where: str) -> list[list[str]]:
    """`torch_fallback` evidence for PyTorch run on the weights alone inside a call."""
    if not on_weights:
        return []
    listed = ", ".join(f"{op} x{n}" for op, n in sorted(on_weights.items(), key=lambda kv: -kv[1])[:6])
    return [["torch_fallback", f"{where}: PyTorch ran on ModelNew's weights inside forward ({listed}): to "
                               f"prepack or fold weights, do it in ModelNew.{HOOK}(self), which the evaluator "
                               "calls once the weights are loaded, outside the checked and timed calls"]]
