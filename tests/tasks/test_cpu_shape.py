"""A KernelBench-format problem (no SHAPES) gets a `cpu` variant derived from its own sizes, for the
CPU backend: the file's large sizes divided by one power of two, globals derived from them following,
one call near the cost of the shipped `cpu` variants; the task probe hands it to the caller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from agentforge.evaluator.api import make_job

from agentforge.candidate import Candidate
from agentforge.cpu_shape import HEADER, TARGET_BYTES, TARGET_FLOPS, call_cost, derive_cpu_shape
from agentforge.task import Task, load_task, probe_entry, read_task

DATA = Path(__file__).resolve().parents[1] / "journeys" / "data"
RELU = DATA / "19_ReLU.py"
CONV = DATA / "42_Conv2d_AddBias_Scale_Tanh.py"


def test_relu_sizes_are_divided_alike_until_a_call_costs_about_a_cpu_variant() -> None:
    task = load_task(RELU)
    derived = derive_cpu_shape(task)
    assert derived is not None and derived.name == "cpu"
    assert derived.original == {"batch_size": 4096, "dim": 393216}
    assert derived.overrides == {"batch_size": 4096 // derived.divisor, "dim": 393216 // derived.divisor}
    # nearest to the target of the power-of-two steps: within a factor of 4 either way (a step is 4x)
    assert TARGET_BYTES / 4 <= derived.bytes <= TARGET_BYTES * 4
    shaped = Task(task.name, task.source + derived.source_suffix())
    assert list(shaped.shapes) == ["default", "cpu"]
    assert shaped.make_inputs(0, "cpu")[0].shape == (derived.overrides["batch_size"], derived.overrides["dim"])
    assert shaped.sizes("default")["dim"] == 393216  # the file's own shape is still there, unchanged
    assert HEADER in derived.source_suffix() and task.source in shaped.source


def test_a_derived_global_follows_the_sizes_it_is_made_from() -> None:
    task = load_task(CONV)
    derived = derive_cpu_shape(task)
    assert derived is not None
    assert derived.overrides["bias_shape"] == (derived.overrides["out_channels"], 1, 1)
    assert derived.overrides.get("kernel_size", 3) == 3  # small sizes (kernels, strides) stay
    flops = derived.flops or 0.0
    assert TARGET_FLOPS / 16 <= flops <= TARGET_FLOPS * 4, flops
    shaped = Task(task.name, task.source + derived.source_suffix())
    model = shaped.make_model(0, "cpu")
    with torch.no_grad():
        out = model(*shaped.make_inputs(0, "cpu"))
    assert out.shape[1] == derived.overrides["out_channels"]


def test_no_variant_is_derived_for_a_task_that_declares_shapes_or_is_already_small(tmp_path: Path) -> None:
    assert derive_cpu_shape(load_task("level1/relu")) is None  # declares its own `cpu`
    small = tmp_path / "1_Small.py"
    small.write_text(RELU.read_text().replace("4096", "64").replace("393216", "1024"))
    task = load_task(small)
    cost = call_cost(task)
    assert cost is not None and cost[0] < TARGET_BYTES
    assert derive_cpu_shape(task) is None


def test_the_probe_derives_for_a_cpu_job_without_a_shape_and_not_otherwise() -> None:
    text = read_task(RELU)
    job = make_job(text, Candidate("", "cpu"), device="cpu")
    figures = probe_entry(job).candidate_meta["task_probe"]
    derived = figures["derived"]
    assert derived["name"] == "cpu" and set(figures["shapes"]) == {"default", "cpu"}
    assert figures["shapes"]["cpu"]["inputs"] == 4.0 * derived["overrides"]["batch_size"] * derived["overrides"]["dim"]
    json.dumps(figures)  # travels as data
    with_shape = make_job(text, Candidate("", "cpu"), device="cpu", shapes=("default",))
    assert "derived" not in probe_entry(with_shape).candidate_meta["task_probe"]  # --shape overrides
    cuda = make_job(text, Candidate("", "cuda"), device="cpu")
    assert "derived" not in probe_entry(cuda).candidate_meta["task_probe"]


def test_a_job_made_from_the_derived_task_checks_times_and_records_it() -> None:
    text = read_task(RELU)
    job = make_job(text, Candidate("", "cpu"), device="cpu")
    derived = probe_entry(job).candidate_meta["task_probe"]["derived"]
    shaped = text.with_derived_shape(derived)
    assert shaped.shape_names == ("default", "cpu") and shaped.path == text.path
    job = make_job(shaped, Candidate("", "cpu"), device="cpu")
    assert job.shapes == ("cpu",) and job.timing_shape == "cpu"
    assert job.candidate_meta["derived_shape"]["overrides"] == derived["overrides"]


@pytest.mark.parametrize("budget", [1 << 16])
def test_the_audit_still_shrinks_a_problem_with_the_same_steps(budget: int) -> None:
    from agentforge.audit import audit_task

    report = audit_task(load_task(RELU), numel_budget=budget)
    assert report.shape is not None and report.shape.startswith("default/"), report
