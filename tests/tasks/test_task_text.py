"""What a task file tells without being imported (shape names, a model hub), and what the probe
and the preflight make of a task's sizes."""

from __future__ import annotations

import pytest
from agentforge.evaluator.result import EvalJob, Status

from agentforge.agent.preflight import PreflightError, check_memory, needed_bytes
from agentforge.task import (
    TaskLoadError,
    declared_shape_names,
    load_task,
    model_hub_use,
    probe_entry,
    read_task,
)


@pytest.mark.parametrize(("source", "expected"), [
    ("N = 4\n", ("default",)),
    ("SHAPES = {'small': {'N': 1}, 'odd': {'N': 3}}\n", ("default", "small", "odd")),
    ("SHAPES = {'default': {'N': 9}, 'small': {'N': 1}}\n", ("default", "small")),
    ("SHAPES: dict = {'tiny': {'N': 1}}\n", ("default", "tiny")),
    ("SHAPES = {}\nSHAPES = {'late': {}}\n", ("default", "late")),
    ("SHAPES = {f'n{i}': {'N': i} for i in range(3)}\n", None),
    ("SHAPES = {'a': {}}\nSHAPES['b'] = {}\n", None),
    ("SHAPES = {'a': {}}\nSHAPES.update(b={})\n", None),
    ("SHAPES = dict(a={})\n", None),
    ("def f(:\n", None),
])
def test_declared_shape_names_are_read_from_the_text_or_left_to_the_probe(source, expected):
    assert declared_shape_names(source) == expected


def test_model_hub_use_is_found_without_running_anything():
    assert model_hub_use("from transformers import AutoConfig\n") == "imports transformers"
    assert model_hub_use("import huggingface_hub.hf_api\n") == "imports huggingface_hub"
    assert model_hub_use("m = lib.Model.from_pretrained('x')\n") == "calls from_pretrained"
    assert model_hub_use("import torch\n") is None


def test_a_model_hub_task_is_refused_before_it_runs(write_task):
    path = write_task("import torch\nfrom transformers import AutoConfig\nraise SystemExit('ran')\n", "level4/x.py")
    with pytest.raises(TaskLoadError, match=r"needs a model hub \(imports transformers; KernelBench level 4\)"):
        load_task(path)


def test_read_task_does_not_import_the_file(write_task):
    path = write_task("raise RuntimeError('imported')\nSHAPES = {'small': {}}\n", "level1/boom.py")
    text = read_task(path)
    assert (text.name, text.shape_names, text.path) == ("level1/boom", ("default", "small"), path.resolve())
    assert len(text.source_hash) == 16
    with pytest.raises(TaskLoadError, match="no such task file"):
        read_task("level1/absent", path.parent.parent)


def test_footprint_sizes_inputs_params_and_outputs_on_meta():
    relu = load_task("level1/relu")
    assert relu.footprint("odd") == {"inputs": 4097 * 9999 * 4.0, "params": 0.0, "outputs": 4097 * 9999 * 4.0,
                                     "declared": 8.0 * 4097 * 9999}
    gemm = load_task("level1/gemm_bf16")
    fp = gemm.footprint("small")
    assert fp["inputs"] > 0 and fp["outputs"] > 0 and fp["declared"] is not None


def test_the_probe_entry_sizes_every_shape_and_reports_a_task_that_does_not_load():
    source = load_task("level1/relu").source
    result = probe_entry(EvalJob(task_name="level1/relu", task_source=source, candidate_source=""))
    assert result.status == Status.OK
    probe = result.candidate_meta["task_probe"]
    assert list(probe["shapes"]) == ["default", "small", "cpu", "odd", "flat"] and probe["dtype"] == "float32"
    assert probe["memory"]["kind"] == "cpu" and probe["memory"]["total_bytes"] > 0
    broken = probe_entry(EvalJob(task_name="level1/x", task_source="raise ValueError('no')\n", candidate_source=""))
    assert broken.status == Status.TASK_ERROR and broken.error.type == "TaskLoadError"
    assert "ValueError: no" in broken.error.message


def test_check_memory_names_the_shapes_that_fit_and_uses_a_lower_bound_on_cuda():
    gib = 2**30
    shapes = {"default": {"inputs": 4.0 * gib, "outputs": 4.0 * gib, "params": 0.0, "declared": None},
              "small": {"inputs": 1e3, "outputs": 1e3, "params": 0.0, "declared": None},
              "odd": {"error": "RuntimeError: no meta kernel"}}
    cpu = {"shapes": shapes, "memory": {"kind": "cpu", "free_bytes": 20.0 * gib, "total_bytes": 24.0 * gib}}
    with pytest.raises(PreflightError) as caught:
        check_memory("level1/t", cpu, ("default", "small", "odd"), tuple(shapes), 16.0, "cpu")
    assert caught.value.kind == "ShapeTooLarge" and caught.value.extra["shapes_that_fit"] == ["small"]
    assert "more than the 16.0 GiB the sandbox may use (sandbox.memory_gb = 16)" in caught.value.message
    check_memory("level1/t", cpu, ("small", "odd"), tuple(shapes), 16.0, "cpu")  # an unsized shape is let through
    small_machine = {**cpu, "memory": {"kind": "cpu", "free_bytes": 1.0 * gib, "total_bytes": 2.0 * gib}}
    with pytest.raises(PreflightError, match=r"more than the 2\.0 GiB this machine has"):
        check_memory("level1/t", small_machine, ("small",), tuple(shapes), 16.0, "cpu")
    gpu = {"shapes": shapes, "memory": {"kind": "cuda", "free_bytes": 79.0 * gib, "total_bytes": 80.0 * gib}}
    check_memory("level1/t", gpu, ("default",), tuple(shapes), 16.0, "cuda")  # 8 GiB of tensors, x6 + 1 GiB
    assert needed_bytes(shapes["default"], "cuda") < needed_bytes(shapes["default"], "cpu")
    assert needed_bytes({"too_large": True}) == float("inf") and needed_bytes(shapes["odd"]) is None


def test_a_kernelbench_problem_using_einops_loads(write_task):
    """KernelBench's Mamba2 problems (level 3) import einops, a dependency of ours for that reason."""
    path = write_task('''
        import torch
        import torch.nn as nn
        from einops import rearrange

        class Model(nn.Module):
            def __init__(self, block_len):
                super().__init__()
                self.block_len = block_len

            def forward(self, x):
                return rearrange(x, "b (c l) h -> b c l h", l=self.block_len).sum(dim=2)

        batch_size, seq_length, n_heads, block_len = 2, 8, 3, 4

        def get_inputs():
            return [torch.randn(batch_size, seq_length, n_heads)]

        def get_init_inputs():
            return [block_len]
        ''', "KernelBench/level3/48_Mamba2_like.py")
    task = load_task(path)
    assert task.name == "level3/48_Mamba2_like"
    assert tuple(task.make_model(0)(*task.make_inputs(0))[0].shape) == (2, 3)
