"""Hidden shapes for KernelBench-format tasks (module-level sizes, no declared variants): derived from
the integer constants get_inputs/get_init_inputs read, on both tracks; on the kernelbench track a
wrong hidden shape is an audit mark (its convention accepts a kernel for the one fixed size), on the
hardened track a rejection."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge import hidden_shapes
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import Measure, Status
from agentforge.sandbox.worker import launch_worker

from agentforge.candidate import Candidate
from agentforge.task import Task

EXPLOITS = Path(__file__).resolve().parents[1] / "exploits"
CPU = torch.device("cpu")

CONV = '''
import torch
from torch import nn
batch_size = 16
in_channels = 3
out_channels = 64
kernel_size = 3
height = 40
width = 24
stride = 1
class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride)
    def forward(self, x):
        return self.conv(x)
def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]
def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
'''

# `features` must be a multiple of `parts` (the reference reshapes by it): tied constants.
TIED = '''
import torch
from torch import nn
rows = 32
features = 256
parts = 16
class Model(nn.Module):
    def forward(self, x):
        return x.view(x.shape[0], parts, -1).softmax(-1).view(x.shape)
def get_inputs():
    return [torch.randn(rows, features)]
def get_init_inputs():
    return []
'''


def is_prime(n: int) -> bool:
    return n > 1 and all(n % f for f in range(2, int(n**0.5) + 1))


def test_the_sizes_are_the_constants_the_inputs_read_not_the_hyperparameters() -> None:
    task = Task("conv", CONV)
    # in_channels (3) and kernel_size are too small or named as a hyperparameter; stride is read by
    # Model only; the local `x` is not a module constant.
    assert hidden_shapes.source_sizes(task) == {"batch_size": 16, "out_channels": 64, "height": 40, "width": 24}
    plan = hidden_shapes.plan(task, "default", seed=5, device=CPU)
    assert "module constants" in plan.origin and not plan.reason, plan
    prime = plan.shapes[0]
    assert prime.kind == "prime" and set(prime.changed) == {"batch_size", "out_channels", "height", "width"}
    assert all(is_prime(v) for v in prime.changed.values()), prime
    assert plan.shapes[-1].kind == "independent"  # every size that tiles grown, none shrunk
    assert all(v > task.sizes()[d] for d, v in plan.shapes[-1].changed.items())
    for shape in [s for s in plan.shapes if s.kind == "large"]:  # one size that tiles at 2-4x, a power of two
        grown = [d for d, v in shape.changed.items() if v > task.sizes()[d]]
        assert len(grown) == 1, shape
        base = task.sizes()[grown[0]]
        assert 2 * base <= shape.changed[grown[0]] <= 4 * base and shape.changed[grown[0]] % 8 == 0
        model = task.make_model(0, shape.name)
        assert model(*task.make_inputs(0, shape.name)).shape[1] == shape.overrides.get("out_channels", 64)
    # The secret seed decides: another seed, other shapes; the same, the same.
    again = hidden_shapes.plan(Task("conv", CONV), "default", seed=5, device=CPU)
    other = hidden_shapes.plan(Task("conv", CONV), "default", seed=6, device=CPU)
    assert [s.changed for s in again.shapes] == [s.changed for s in plan.shapes]
    assert [s.changed for s in other.shapes] != [s.changed for s in plan.shapes]


def test_tied_constants_drop_the_variant_that_breaks_them_and_keep_the_task_working() -> None:
    """A prime `features` no prime `parts` divides: the reference fails on the meta device, so the
    prime shape is dropped and said so; the 2-4x shapes keep both multiples of 16 and run."""
    task = Task("tied", TIED)
    plan = hidden_shapes.plan(task, "default", seed=3, device=CPU)
    assert any(d.startswith("prime shape dropped: the reference does not run") for d in plan.dropped), plan
    assert plan.shapes and all(s.kind in ("large", "independent") for s in plan.shapes)
    for shape in plan.shapes:
        inputs = task.make_inputs(0, shape.name)
        assert task.make_model(0, shape.name)(*inputs).shape == inputs[0].shape


def kb_softmax() -> Task:
    """tests/exploits' row softmax as KernelBench writes problems: its sizes as module constants, no
    shape variants."""
    source = (EXPLOITS / "tasks" / "row_softmax.py").read_text()
    assert 'SHAPES = {"odd": {"N": 29, "D": 201}}\n' in source
    return Task("kb_row_softmax", source.replace('SHAPES = {"odd": {"N": 29, "D": 201}}\n', ""))


FIXED_COLS = (EXPLOITS / "cases" / "shape_hardcoded.py").read_text()  # right only for rows of 256
HONEST = (EXPLOITS / "honest" / "softmax_cpp.py").read_text()


def evaluate(source: str, track: str) -> object:
    job = make_job(kb_softmax(), Candidate(source, backend="cpu"), device="cpu", track=track,
                   measure=Measure(timing=False))
    return run_pipeline(job, launch_worker)


def test_kernelbench_track_marks_a_kernel_right_only_at_the_fixed_size(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = evaluate(FIXED_COLS, "kernelbench")
    assert result.status == Status.OK and result.accepted, result.summary()
    assert [(f.rule, f.severity) for f in result.flags] == [("shape_specialised", "audit")], result.flags
    assert all(r.passed for r in result.correctness)  # the audit leaves no failed record
    hidden = result.provenance.track_settings["correctness"]["hidden_shapes"]
    assert hidden["severity"] == "audit" and "N=64, D=256" in hidden["origin"], hidden
    assert hidden["failed"] and set(hidden["why_failed"]) == set(hidden["failed"]), hidden
    assert all("D=" in sizes for sizes in hidden["failed"].values())  # the rows it was wrong on changed length
    assert hidden["ran"] == len(hidden["failed"]) + len(hidden["passed"]) >= 2


def test_kernelbench_track_leaves_an_honest_kernel_unmarked_and_lists_the_shapes_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = evaluate(HONEST, "kernelbench")
    assert result.status == Status.OK and result.accepted and not result.flags, result.summary()
    hidden = result.provenance.track_settings["correctness"]["hidden_shapes"]
    assert hidden["ran"] >= 2 and not hidden["failed"] and len(hidden["passed"]) == hidden["ran"], hidden
    assert {r.shape for r in result.correctness} == {"default", *hidden["passed"]}


def test_hardened_track_rejects_the_same_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = evaluate(FIXED_COLS, "hardened")
    assert result.status == Status.MISMATCH and not result.accepted, result.summary()
    assert any(f.rule == "shape_specialised" and f.severity == "reject" for f in result.flags), result.flags
    assert any(not r.passed and r.shape.startswith("hidden-") for r in result.correctness)
