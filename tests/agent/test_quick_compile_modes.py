"""`optimize --quick` (the GPU demo's setting) times the torch.compile baseline in its default mode
only: max-autotune would tune again in every evaluation's fresh sandbox, minutes each on a GPU."""

from __future__ import annotations

from typing import Any

import pytest
from agentforge.evaluator.result import Measure

from agentforge import evaluation
from agentforge.agent.run import _sandboxed_evaluate
from agentforge.candidate import Candidate
from agentforge.cli.optimize_cmd import QUICK_COMPILE_MODES
from agentforge.settings import load_settings
from agentforge.task import load_task


@pytest.mark.parametrize(("modes", "expected"), [(None, Measure().compile_modes), (("default",), ("default",))])
def test_the_evaluations_jobs_carry_the_runs_compile_modes(monkeypatch, modes, expected) -> None:
    jobs: list[Any] = []
    monkeypatch.setattr(evaluation, "evaluate", lambda job, sandbox=None: jobs.append(job))
    run = _sandboxed_evaluate(load_settings(), "cpu", ("eager", "compile"), None, (), compile_modes=modes)
    run(load_task("level1/relu"), Candidate("class ModelNew: pass", "cpu"))
    assert jobs[0].measure.compile_modes == expected and jobs[0].measure.baselines == ("eager", "compile")


def test_quick_is_default_mode_only() -> None:
    assert QUICK_COMPILE_MODES == ("default",) and "max-autotune" in Measure().compile_modes
