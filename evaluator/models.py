"""The models both sides build the same way: the reference and a ModelNew in KernelBench's mode,
and the content prints the judge and the worker compare inputs by."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from agentforge.evaluator import prepack

from agentforge.task import Task


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
        prepack.prepare(candidate)
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
