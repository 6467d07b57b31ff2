"""The pipeline as a list of stages over a mode decided once, and integrity evidence from registered
checks (`evaluator/judge/pipeline.py`, `evaluator/judge/checks.py`)."""

from __future__ import annotations

import pytest
import torch
from agentforge.evaluator import integrity
from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge import checks, pipeline
from agentforge.evaluator.judge.pipeline import Mode, execution_mode

from agentforge.candidate import Candidate
from agentforge.task import Task

TASK = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(64, 64)]
def get_init_inputs():
    return []
"""
CUDA = ("from torch.utils.cpp_extension import load_inline\n"
        "_k = load_inline(name='k', cpp_sources='', cuda_sources='__global__ void k() {}')\n"
        "class ModelNew: pass\n")


def _mode(backend: str, source: str = "class ModelNew: pass\n", **job: object) -> Mode:
    task = Task("relu", TASK)
    ctx = pipeline.Context(make_job(task, Candidate(source, backend), device="cpu", **job))
    ctx.device = torch.device("cpu")
    return execution_mode(ctx, task, ["default"])[0]


def test_the_mode_is_decided_from_the_job_and_the_machine() -> None:
    assert _mode("cpu") == Mode.NATIVE
    assert _mode("triton") == Mode.INTERPRETED
    assert _mode("cuda", CUDA) == Mode.EMULATED
    assert _mode("cuda", CUDA, emulate=False) == Mode.COMPILE_ONLY
    assert _mode("cpu", compile_only=True) == Mode.COMPILE_ONLY


def test_every_mode_has_stages_and_only_the_native_one_times() -> None:
    assert set(pipeline.STAGES) == set(Mode)
    timed = {mode for mode, stages in pipeline.STAGES.items() if pipeline._timing in stages}
    assert timed == {Mode.NATIVE}


def _evidence(**fields: object) -> checks.Evidence:
    return checks.Evidence(Task("relu", TASK), **fields)


def test_a_rule_the_worker_made_up_is_dropped_and_a_known_one_kept() -> None:
    found = checks.collect(_evidence(final={"evidence": [("made_up_rule", "x"), ("torch_fallback", "y")]}))
    assert ("torch_fallback", "y") in found and all(rule in integrity.RULES for rule, _ in found)


def test_dispatched_compute_is_a_fallback_and_malformed_counts_are_ignored() -> None:
    found = checks.collect(_evidence(final={"op_counts": {"aten::relu": 3, "aten::mm": "many"}}))
    assert found == [("torch_fallback", "ModelNew.forward dispatched PyTorch compute: aten::relu x3")]


def test_a_check_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="twice"):
        checks.check("static")(lambda ev: [])


def test_the_timing_checks_run_in_order_clocks_before_threads() -> None:
    from agentforge.evaluator.judge import stage_timing

    names = list(stage_timing.TIMING_CHECKS)
    assert names == ["timed_outputs", "clocks", "outside_windows", "null_windows", "threads", "device"]
    with pytest.raises(ValueError, match="twice"):
        stage_timing.timing_check("clocks")(lambda t: None)
