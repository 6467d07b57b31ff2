"""One job end to end through the real entry (`agentforge.evaluator.judge.pipeline.run_pipeline`) in the
sandbox child: a float32 ReLU task and an honest C++ kernel on the CPU backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentforge.evaluator.result import EvalJob, Measure, Status
from agentforge.sandbox import run

from tests.fixtures import relu
from tests.fixtures.sandbox import quiet

pytestmark = pytest.mark.slow

TASK = relu.task(4096)
CANDIDATE = relu.lean_candidate("sandbox_e2e_relu")


def test_real_pipeline_through_the_sandbox(tmp_path: Path) -> None:
    job = EvalJob(task_name="relu_e2e", task_source=TASK, candidate_source=CANDIDATE, backend="cpu",
                  device="cpu", measure=Measure(timing=False, baselines=("eager",)))
    config = quiet(tmp_path, timeout_s=300)
    result = run(job, config)
    assert result.status == Status.OK, result.error
    assert result.compiled and result.correct
    assert result.provenance.sandbox.startswith("process+")


def test_child_pins_the_numeric_switches(tmp_path: Path) -> None:
    import sys

    here = str(Path(__file__).resolve().parent)
    config = quiet(tmp_path, entry="fake_entries:report_switches", python_paths=(here,), torch_switches=True,
                   timeout_s=120)
    job = EvalJob(task_name="switches", task_source="", candidate_source="")
    result = run(job, config)
    assert result.status == Status.OK, result.error
    assert result.candidate_meta["note"] == "tf32=False,False precision=highest deterministic=False"
    assert "fake_entries" not in sys.modules  # the parent never imported the entry or the candidate
