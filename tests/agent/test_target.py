"""A judge steered by performance (issue 19, item 2): the run's target (`--target compile|eager|
sol:F`, compile by default), the judge reading the gaps to eager, torch.compile and the roofline
floor, and a correct kernel slower than the target, far below speed of light, never stopped by a
plateau while a budget remains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentforge.agent.budget import stop_reason
from agentforge.agent.run import optimize
from agentforge.agent.target import TargetError, parse_target
from agentforge.settings import AgentSettings, Settings, SettingsError


def test_target_forms_and_their_validation():
    assert parse_target("compile").kind == "compile" and parse_target("eager").kind == "eager"
    assert parse_target("sol:0.8").fraction == pytest.approx(0.8)
    for bad in ("sol:0", "sol:1.5", "fast", "sol:"):
        with pytest.raises(TargetError, match="sol:F"):
            parse_target(bad)
    settings = Settings()
    settings.agent.target = "sol:2"
    with pytest.raises(SettingsError, match=r"agent\.target"):
        settings.validate()


LIMITS = dict(max_rounds=10, plateau_rounds=2, sol_stop=0.95)
FLAT = {"round": 3, "flat_rounds": 2}


@pytest.mark.parametrize(("target", "best", "stops"), [
    ("compile", {"speedup": 1.5, "speedup_vs_compile": 0.8, "sol_fraction": 0.2}, None),  # slower, far: go on
    ("compile", {"speedup": 1.5, "speedup_vs_compile": 0.8, "sol_fraction": 0.9}, "plateau"),  # near the floor
    ("compile", {"speedup": 1.5, "speedup_vs_compile": 0.8, "sol_fraction": None}, "plateau"),  # gap unknown
    ("compile", {"speedup": 2.0, "speedup_vs_compile": 1.2, "sol_fraction": 0.2}, "plateau"),  # target met
    ("compile", {"speedup": 0.5, "speedup_vs_compile": None, "sol_fraction": 0.2}, None),  # no compile: eager
    ("eager", {"speedup": 1.5, "speedup_vs_compile": 0.8, "sol_fraction": 0.2}, "plateau"),
    ("sol:0.8", {"speedup": 1.5, "speedup_vs_compile": 0.8, "sol_fraction": 0.4}, None),
])
def test_a_plateau_stops_only_a_kernel_that_met_its_target_or_is_near_the_floor(target, best, stops):
    reason = stop_reason({**FLAT, "best": best}, AgentSettings(target=target, **LIMITS))
    assert (reason.split(":")[0] if reason else None) == stops


def test_a_sol_target_stops_when_reached():
    reason = stop_reason({"round": 1, "best": {"speedup": 3.0, "sol_fraction": 0.85}},
                         AgentSettings(target="sol:0.8", **LIMITS))
    assert reason.startswith("target reached") and "85%" in reason
    assert stop_reason({"round": 1, "best": {"sol_fraction": 0.85}}, AgentSettings(**LIMITS)) is None


def _with_compile(kernels, compile_us: float):
    """The fake evaluation, with a torch.compile baseline and a roofline floor of 2 us."""
    def evaluate(task, candidate):
        result = kernels.fake_evaluate(task, candidate)
        timing = result.timing
        baselines = {**timing.baselines, "compile": dataclasses.replace(timing.baselines["eager"],
                                                                         median_us=compile_us)}
        roof = dataclasses.replace(result.roofline, floor_us=2.0, sol_fraction=2.0 / timing.candidate.median_us)
        return dataclasses.replace(result, timing=dataclasses.replace(timing, baselines=baselines), roofline=roof)
    return evaluate


def _run(tmp_path: Path, relu_task: Path, kernels, target: str, compile_us: float):
    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    settings.agent.max_rounds, settings.agent.plateau_rounds, settings.agent.target = 3, 1, target
    coder = [kernels.fenced(kernels.fake_kernel(tag, us=10)) for tag in ("a", "b", "c")]
    provider = kernels.FakeProvider(coder)
    summary = optimize(str(relu_task), settings, provider=provider, evaluate=_with_compile(kernels, compile_us))
    return summary, [p for role, p in provider.prompts if role == "judge"]


def test_correct_but_slower_than_compile_is_not_done_and_the_judge_reads_the_gaps(tmp_path, relu_task, kernels):
    # 10 us: 10x faster than eager (100 us), slower than torch.compile (8 us), 20 % of speed of light.
    summary, judge_prompts = _run(tmp_path, relu_task, kernels, "compile", compile_us=8.0)
    assert summary.rounds == 3 and summary.stop_reason.startswith("rounds")  # no plateau stop at round 2
    first = judge_prompts[0]
    assert "Target of this run: beat torch.compile" in first
    assert "vs torch.compile: 8.00 us, 0.80x (needs 20% less time to match it)" in first
    assert "vs eager PyTorch: 100.00 us, 10.00x (faster)" in first
    assert "roofline floor is 2.00 us" in first and "reaches 20% of it" in first
    assert "Target not reached: this kernel is correct but not done" in first


def test_a_kernel_that_beats_its_target_may_plateau(tmp_path, relu_task, kernels):
    summary, judge_prompts = _run(tmp_path, relu_task, kernels, "eager", compile_us=8.0)
    assert summary.rounds == 2 and summary.stop_reason.startswith("plateau")
    assert "Target of this run: beat eager PyTorch" in judge_prompts[0] and "Target reached" in judge_prompts[0]
