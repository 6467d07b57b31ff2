"""`RunSpec`: one value for what a run measures and how it searches, validated once, written to
run.json in the keys runs have always used, and read back on resume."""

from __future__ import annotations

import pytest
from agentforge.evaluator.result import TimingConfig

from agentforge.agent.spec import RunSpec, RunSpecError


def test_a_spec_survives_run_json_and_an_older_runs_meta_reads_with_defaults() -> None:
    spec = RunSpec(baselines=["eager"], compile_modes=("default",), timing=TimingConfig(max_reps=20),
                   shapes=["small", "cpu"], candidates=4, beam=2, skills=False, exemplars=False, review=True)
    meta = spec.to_meta()
    assert meta["search"] == {"candidates": 4, "beam": 2} and meta["knowledge"] == {"skills": False, "exemplars": False}
    assert RunSpec.from_meta(meta) == spec and spec.shapes == ("small", "cpu")
    older = {"baselines": ["eager", "compile"], "timing": None, "shapes": []}  # before search and knowledge
    assert RunSpec.from_meta(older) == RunSpec()


def test_a_spec_no_run_can_start_with_is_refused_with_the_field() -> None:
    with pytest.raises(RunSpecError, match="--candidates and --beam must be at least 1"):
        RunSpec(candidates=0)
    with pytest.raises(RunSpecError, match=r"unknown baseline\(s\) \['cudnn'\]"):
        RunSpec(baselines=("eager", "cudnn"))
    assert RunSpec(compile_modes=()).compile_modes is None  # no modes named: the evaluator's default
