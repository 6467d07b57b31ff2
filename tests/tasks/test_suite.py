"""The shipped suite in tasks/: counts, metadata, shape variants, and the audit on every task."""

from __future__ import annotations

import time
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import torch

from agentforge.audit import audit_task
from agentforge.task import DEFAULT_SHAPE, Task, default_tasks_root, discover, load_task

PATHS = discover(default_tasks_root())
#: What 2026 practice runs in bf16/fp16 (GEMMs, attention and norms of LLMs).
HALF_PRECISION_KINDS = {"gemm", "attention", "norm"}


@cache
def _task(path: Path) -> Task:
    return load_task(path)


def _ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}" for p in paths]


def test_suite_has_the_promised_counts():
    levels = Counter(p.parent.name for p in PATHS)
    assert levels["level1"] >= 30 and levels["level2"] >= 20 and levels["level3"] >= 8
    backward = [p for p in PATHS if "backward" in _task(p).tags]
    assert len(backward) >= 5
    assert all("backward" in p.stem for p in backward)


def test_file_names_are_lower_snake_case():
    for path in PATHS:
        assert path.stem == path.stem.lower() and path.stem.replace("_", "").isalnum(), path


@pytest.mark.parametrize("path", PATHS, ids=_ids(PATHS))
def test_task_metadata_is_complete(path):
    task = _task(path)
    assert task.module.__doc__, "each task opens with a docstring saying what it computes"
    bound = {"memory-bound", "compute-bound"} & set(task.tags)
    assert len(bound) == 1, f"tags must say memory-bound or compute-bound: {task.tags}"
    assert task.allowed_torch_ops == ()
    if "llm" in task.tags and HALF_PRECISION_KINDS & set(task.tags):
        assert task.dtype_name in ("bfloat16", "float16")
    variants = [s for s in task.shapes if s != DEFAULT_SHAPE]
    assert len(variants) >= 2 and "small" in variants
    odd = [s for s in variants if any(isinstance(v, int) and v % 32 for v in task.shapes[s].values())]
    assert odd, "one variant must have a size that is not a multiple of 32"
    for shape in task.shapes:
        assert task.flops(shape) >= 0 and task.bytes_moved(shape) > 0, shape
        assert task.input_numel(shape) > 0, shape
    if "compute-bound" in task.tags:
        assert task.flops() / task.bytes_moved() > 10, "compute-bound tasks do > 10 FLOP per byte"


@pytest.mark.parametrize("path", PATHS, ids=_ids(PATHS))
def test_default_shape_builds_on_meta_and_is_large(path):
    task = _task(path)
    model = task.instantiate_on_meta()
    assert all(p.is_meta for p in model.parameters())
    # Defaults fill a GPU: at least 16 MB of minimum traffic.
    assert task.bytes_moved() >= 16e6


@pytest.mark.parametrize("path", PATHS, ids=_ids(PATHS))
def test_small_variant_runs_fast_and_passes_the_audit(path):
    task = _task(path)
    model, inputs = task.make_model(0, "small"), task.make_inputs(0, "small")
    with torch.no_grad():
        model(*inputs)  # warm-up: first calls pay for lazy initialisation
        # CPU time of this process, not wall time: the test machine is shared.
        start = time.process_time()
        model(*inputs)
    assert time.process_time() - start < 0.5
    report = audit_task(task, shape="small")
    assert report.ok, [f"{f.check}: {f.detail}" for f in report.findings]


@pytest.mark.parametrize("path", PATHS, ids=_ids(PATHS))
def test_inputs_are_signed_so_zero_or_identity_answers_fail(path):
    task = _task(path)
    floats = [x for x in task.make_inputs(0, "small") if x.is_floating_point()]
    floats = floats or [p.detach() for p in task.make_model(0, "small").parameters()]  # embedding table
    assert floats and any(float(x.min()) < 0 < float(x.max()) for x in floats)
