"""Hidden shapes (`evaluator/judge/hidden_shapes.py`, `Task.scaling_sizes`): derived per evaluation from the
declared variants, only on the sizes they show to scale, and reported in the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge import hidden_shapes
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import Measure
from agentforge.sandbox.worker import launch_worker

from agentforge.candidate import Candidate
from agentforge.task import Task, load_task

ROOT = Path(__file__).resolve().parents[1] / "exploits"
CPU = torch.device("cpu")

GROUPED = '''
import torch
from torch import nn
BATCH = 4
CHANNELS = 64
WIDTH = 48
GROUPS = 8
EPS = 1e-5
SHAPES = {"small": {"BATCH": 2, "CHANNELS": 16, "WIDTH": 5, "GROUPS": 4}, "odd": {"CHANNELS": 96, "WIDTH": 51}}
class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
    def forward(self, x):
        return self.norm(x)
def get_inputs():
    return [torch.randn(BATCH, CHANNELS, WIDTH)]
def get_init_inputs():
    return [CHANNELS, GROUPS]
'''

FIXED = '''
import torch
from torch import nn
COLS = 101
EPS = 1e-5
SHAPES = {"again": {"COLS": 101}, "eps": {"EPS": 1e-6}}
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(37, 101)]
def get_init_inputs():
    return []
'''

SQUARE = '''
import torch
from torch import nn
N = 64
SHAPES = {"small": {"N": 8}}
class Model(nn.Module):
    def forward(self, x):
        return x @ x
def get_inputs():
    return [torch.randn(N, N)]
def get_init_inputs():
    return []
'''


def is_prime(n: int) -> bool:
    return n > 1 and all(n % f for f in range(2, int(n**0.5) + 1))


def test_scaling_sizes_are_the_ones_the_variants_change() -> None:
    task = Task("grouped", GROUPED)
    assert task.scaling_sizes() == {"BATCH": (4, 2), "CHANNELS": (64, 16, 96), "WIDTH": (48, 5, 51),
                                    "GROUPS": (8, 4)}
    assert Task("fixed", FIXED).scaling_sizes() == {}  # a float, one value only, sizes fixed inside get_inputs


def test_prime_and_large_shapes_from_the_base_and_the_seed() -> None:
    task = load_task("level1/relu")
    plan = hidden_shapes.plan(task, "cpu", seed=123, device=CPU)
    kinds = [s.kind for s in plan.shapes]
    assert kinds[0] == "prime" and kinds.count("large") == 2 and kinds[-1] == "independent", plan
    prime = plan.shapes[0].changed
    assert set(prime) == {"ROWS", "COLS"} and all(is_prime(v) and 1024 <= v <= 2048 for v in prime.values())
    base_bytes, _ = hidden_shapes._cost(task, "cpu")
    independent = plan.shapes[-1].changed
    # Every size grown by its own factor, none shrunk: no product of sizes is the base's.
    assert set(independent) == {"ROWS", "COLS"} and all(1.15 * 2048 <= v <= 1.6 * 2048 for v in independent.values())
    for shape in plan.shapes[1:-1]:
        grown = [d for d, v in shape.changed.items() if v > 2048]
        assert len(grown) == 1 and 2 * 2048 <= shape.changed[grown[0]] <= 4 * 2048, shape
        # The other size shrinks by as much: the shape costs what the base does.
        assert 0.9 <= hidden_shapes._cost(task, shape.name)[0] / base_bytes <= 1.1
    # Usable like any variant, yet listed nowhere else.
    assert tuple(task.make_inputs(0, plan.shapes[1].name, "meta")[0].shape) == (
        plan.shapes[1].overrides["ROWS"], plan.shapes[1].overrides["COLS"])
    assert not any(s.name in task.shapes for s in plan.shapes)
    # The same secret seed derives the same shapes (replay); another seed, others.
    again = hidden_shapes.plan(load_task("level1/relu"), "cpu", seed=123, device=CPU)
    other = hidden_shapes.plan(load_task("level1/relu"), "cpu", seed=124, device=CPU)
    assert [s.changed for s in again.shapes] == [s.changed for s in plan.shapes]
    assert [s.changed for s in other.shapes] != [s.changed for s in plan.shapes]


@pytest.mark.parametrize("seed", range(6))
def test_shared_factors_are_kept_and_the_reference_must_build(seed: int) -> None:
    """CHANNELS (declared 64, 16, 96: all multiples of 16) stays a multiple of 16; GROUPS must divide it
    (GroupNorm's constructor says so on the meta device), so a draw that breaks that is redrawn."""
    task = Task("grouped", GROUPED)
    plan = hidden_shapes.plan(task, "default", seed=seed, device=CPU)
    assert plan.shapes and not plan.reason
    for shape in plan.shapes:
        sizes = {**task.sizes("default"), **shape.overrides}
        assert sizes["CHANNELS"] % 16 == 0 and sizes["GROUPS"] % 4 == 0 and sizes["CHANNELS"] % sizes["GROUPS"] == 0
        model = task.make_model(0, shape.name)
        assert model(*task.make_inputs(0, shape.name)).shape == (sizes["BATCH"], sizes["CHANNELS"], sizes["WIDTH"])


def test_a_shape_past_the_cost_cap_is_dropped_and_said_so() -> None:
    """x @ x on an N x N input, N the only scaling size (nothing to shrink): N at 2-4x the base is
    4-16x the bytes, past the cap unless near 2x."""
    for seed in range(8):
        task = Task("square", SQUARE)
        plan = hidden_shapes.plan(task, "default", seed=seed, device=CPU)
        base, _ = hidden_shapes._cost(task, "default")
        for shape in plan.shapes:
            cost, ran = hidden_shapes._cost(task, shape.name)
            assert ran and cost <= hidden_shapes.COST_FACTOR * base
        if any("base's bytes" in d for d in plan.dropped):
            return
    pytest.fail("no draw of a large N was dropped for its cost")


def test_no_hidden_shapes_where_the_task_does_not_say_what_scales() -> None:
    fixed = hidden_shapes.plan(Task("fixed", FIXED), "default", seed=1, device=CPU)
    assert not fixed.shapes and "no size differs" in fixed.reason
    # No variants, and no module constant the inputs read: nothing is known to scale.
    literal = Task("literal", FIXED.replace('SHAPES = {"again": {"COLS": 101}, "eps": {"EPS": 1e-6}}\n', ""))
    plan = hidden_shapes.plan(literal, "default", seed=1, device=CPU)
    assert not plan.shapes and "declares no shape variants" in plan.reason and "read no" in plan.reason
    # No variants, sizes as module constants (KernelBench's format): those scale
    # (tests/evaluator/test_hidden_shapes_kernelbench.py).
    undeclared = Task("undeclared", (ROOT / "tasks" / "slow_reference_sum.py").read_text())
    assert set(hidden_shapes.plan(undeclared, "default", seed=1, device=CPU).shapes[0].changed) == {"N", "D"}


HONEST_RELU = (ROOT / "honest" / "relu_cpp.py").read_text()


def test_the_verdict_reports_hidden_shapes_and_why_none_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    task = Task("elementwise_relu", (ROOT / "tasks" / "elementwise_relu.py").read_text())
    result = run_pipeline(make_job(task, Candidate(HONEST_RELU, backend="cpu"), device="cpu",
                                   measure=Measure(timing=False)), launch_worker)
    assert result.accepted and not result.flags, result.summary()
    hidden = result.provenance.track_settings["correctness"]["hidden_shapes"]
    assert hidden["ran"] == 4 and not hidden["failed"] and len(hidden["passed"]) == 4, hidden
    assert {r.shape for r in result.correctness} >= set(hidden["passed"])
    # A task whose sizes are fixed inside get_inputs keeps working, and the verdict says why none ran.
    fixed = run_pipeline(make_job(Task("fixed", FIXED), Candidate(HONEST_RELU, backend="cpu"), device="cpu",
                                  measure=Measure(timing=False)), launch_worker)
    assert fixed.accepted and not fixed.flags, fixed.summary()
    notes = fixed.provenance.track_settings["correctness"]["hidden_shapes"]
    assert notes["ran"] == 0 and "no size differs" in notes["skipped"]["all"], notes
