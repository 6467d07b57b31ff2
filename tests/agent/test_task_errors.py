"""A broken task stops `optimize` at once and says why; no round "repairs" a kernel for it.

The loop's rule is pinned with a task_error EvalResult built directly (as the evaluator's task
check returns it); the preflight and the in-round check run the real sandbox and evaluator on
deliberately broken task files, with a counting fake provider standing for the paid LLM."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from agentforge.evaluator.result import ErrorRecord, EvalResult, Stage, Status

from agentforge.agent.run import RunError, optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings
from tests.fixtures import relu

BROKEN_GET_INPUTS = relu.broken_get_inputs(1000)

FAILS_AT_IMPORT = '''
import torch
raise ImportError("this task cannot import its helper")
'''

# 2**36 fp32 elements (256 GiB) by default: no machine running these tests can evaluate it.
HUGE_DEFAULT = '''
import torch

N = 2 ** 36
SHAPES = {"small": {"N": 1000}}

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
'''

SLEEPS_AT_IMPORT = '''
import time
import torch
time.sleep(600)
'''


def _settings(tmp_path: Path, **sandbox: object) -> Settings:
    settings = Settings(runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"))
    settings.eval.backend = "cpu"
    settings.eval.profile = False
    settings.sandbox.isolation = "none"  # the child reads pytest's private tmp folders
    for key, value in sandbox.items():
        setattr(settings.sandbox, key, value)
    return settings


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "level1" / "broken.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_a_task_error_in_round_one_stops_the_run_without_a_judge_or_a_repair(tmp_path, relu_task, kernels):
    def task_error(task, candidate):
        return EvalResult(task.name, candidate.code_hash, candidate.backend, Status.TASK_ERROR, Stage.TASK,
                          error=ErrorRecord("TaskReferenceError", f"task {task.name}, shape 'default': the "
                                            "reference Model raised ValueError: bad"))

    provider = kernels.FakeProvider([kernels.fenced(kernels.fake_kernel("a", us=10))] * 3)
    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    summary = optimize(str(relu_task), settings, provider=provider, evaluate=task_error)
    assert summary.status == "task_error"
    assert summary.stop_reason.startswith("task error: TaskReferenceError: task relu_task, shape 'default'")
    assert "fix the task file" in summary.stop_reason
    assert summary.rounds == 1 and summary.history[0]["status"] == "task_error"
    assert summary.history[0]["outcome"] == "the task failed before the candidate ran: stopped"
    assert [role for role, _ in provider.prompts] == ["coder"]  # one coder call, no judge, no repair
    assert "task error" in Path(summary.outputs["report"]).read_text()


def test_a_task_that_fails_at_import_is_refused_before_any_llm_call(tmp_path, kernels):
    provider = kernels.FakeProvider([])
    with pytest.raises(RunError, match=r"task error: TaskLoadError: .*cannot import its helper"):
        optimize(str(_write(tmp_path, FAILS_AT_IMPORT)), _settings(tmp_path), provider=provider)
    assert provider.prompts == []
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_task_that_hangs_at_import_is_refused_within_the_sandbox_timeout(tmp_path, kernels):
    provider = kernels.FakeProvider([])
    started = time.monotonic()
    with pytest.raises(RunError, match=r"task error: TaskTimeout: task level1/broken: .*ran past 5 s"):
        optimize(str(_write(tmp_path, SLEEPS_AT_IMPORT)), _settings(tmp_path, timeout_s=5.0), provider=provider)
    assert time.monotonic() - started < 60 and provider.prompts == []


def test_an_unknown_shape_and_a_shape_too_large_are_refused_before_any_llm_call(tmp_path, relu_task, kernels):
    provider = kernels.FakeProvider([])
    with pytest.raises(RunError, match=r"relu_task has no shape 'huge'; its shapes: default, odd"):
        optimize(str(relu_task), _settings(tmp_path), provider=provider, spec=RunSpec(shapes=("huge",)))
    with pytest.raises(RunError, match=r"level1/broken: 'default' needs about .* GiB .*; shapes that fit: small"):
        optimize(str(_write(tmp_path, HUGE_DEFAULT)), _settings(tmp_path), provider=provider)
    assert provider.prompts == []


@pytest.mark.slow
def test_e2e_with_the_evaluators_task_check_a_broken_get_inputs_stops_optimize_after_one_round(tmp_path, kernels):
    """Through the real sandboxed evaluator: the preflight cannot see a get_inputs that raises
    (sizing on the meta device fails, so it leaves the verdict to the evaluator), the evaluator's
    task check finds it in round 1, and the run stops there."""
    provider = kernels.FakeProvider([kernels.fenced(kernels.FAST)] * 3)
    summary = optimize(str(_write(tmp_path, BROKEN_GET_INPUTS)), _settings(tmp_path), RunSpec(baselines=("eager",)),
                       provider=provider)
    assert summary.status == "task_error", summary.history
    assert summary.stop_reason.startswith("task error: TaskInputsError: task level1/broken, shape 'default'")
    assert "deliberately broken get_inputs" in summary.stop_reason
    assert summary.rounds == 1 and [role for role, _ in provider.prompts] == ["coder"]
