"""Prepacking a weight (issue 30, item 7): the sanctioned hook is accepted, the two ways users tried
before are rejected with their cause named, all through real sandboxed evaluations (CPU backend, a
lean C++ linear layer on a transposed weight); and the worker's classification of weight operators."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from agentforge.evaluator import prepack
from agentforge.evaluator.result import EvalResult, Measure, Status, TimingConfig

from agentforge.candidate import Candidate
from agentforge.evaluation import evaluate_many, make_job
from agentforge.task import Task
from tests.fixtures.sandbox import quiet

EXPLOITS = Path(__file__).resolve().parents[1] / "exploits"
TASK = EXPLOITS / "tasks" / "small_linear.py"
HOOK = EXPLOITS / "honest" / "linear_prepacked_cpp.py"  # prepacked in prepare_weights()
STALE = EXPLOITS / "cases" / "prepack_stale_init.py"  # prepacked in __init__ only
TIMING = TimingConfig(warmup=3, min_reps=10, max_reps=20, time_cap_s=1.0)


def in_forward_source() -> str:
    """The second way users tried: prepacked inside forward, once per weight version (pointer and
    `_version`, so it follows every load), no hook."""
    source = HOOK.read_text()
    source = source.replace("        self.prepare_weights()\n\n    def prepare_weights(self) -> None:",
                            "        self.packed_for = None\n\n    def pack(self) -> None:")
    source = source.replace("            self.prepare_weights()", "            self.pack()")
    assert "prepare_weights" not in source.split("# seen:")[1]
    return source.replace('"linear_prepacked"', '"linear_prepacked_in_forward"')


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EvalResult]]:
    root = tmp_path_factory.mktemp("prepack")
    config = quiet(root, timeout_s=240)
    task = Task("small_linear", TASK.read_text())
    sources = {"hook": HOOK.read_text(), "stale": STALE.read_text(), "in_forward": in_forward_source()}
    jobs = [make_job(task, Candidate(src, backend="cpu"), device="cpu", timing=TIMING,
                     measure=Measure(timing=name == "hook", baselines=("eager",))) for name, src in sources.items()]
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # as the exploit corpus: idle OpenMP workers inflate eager
    try:
        yield dict(zip(sources, evaluate_many(jobs, config, workers=2), strict=True))
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved


def test_a_weight_prepacked_in_the_hook_is_accepted_with_no_flag(verdicts: dict[str, EvalResult]) -> None:
    result = verdicts["hook"]
    assert result.status == Status.OK and result.accepted, result.summary()
    assert not result.flags, [(f.rule, f.evidence[:200]) for f in result.flags]
    assert result.timing is not None and result.timing.candidate.median_us > 0


def test_a_weight_prepacked_in_init_is_named_stale(verdicts: dict[str, EvalResult]) -> None:
    result = verdicts["stale"]
    assert result.status == Status.MISMATCH, result.summary()
    stale = [f for f in result.flags if f.rule == "stale_weights"]
    assert stale and stale[0].severity == "reject", result.summary()
    assert "linear.weight holds the values ModelNew(...) drew itself" in stale[0].evidence
    assert "prepare_weights" in stale[0].evidence
    first = next(r for r in result.correctness if not r.passed)
    assert first.message.startswith("stale weights (linear.weight)"), first.message


def test_a_weight_prepacked_in_forward_names_the_hook(verdicts: dict[str, EvalResult]) -> None:
    result = verdicts["in_forward"]
    assert result.status == Status.INTEGRITY_FLAG, result.summary()
    fallback = [f for f in result.flags if f.rule == "torch_fallback"]
    assert fallback, result.summary()
    assert "PyTorch ran on ModelNew's weights inside forward (aten::clone x1)" in fallback[0].evidence
    assert "ModelNew.prepare_weights(self)" in fallback[0].evidence
    assert all(r.passed for r in result.correctness), "every output is the candidate's own and right"


# ----- in-process: the hook and the recorder ------------------------------------------------------
class _Packs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.calls = 0

    def prepare_weights(self) -> None:
        self.calls += 1
        self.grad_on = torch.is_grad_enabled()
        self.weight_t = self.linear.weight.t().contiguous()


def test_prepare_calls_the_hook_without_gradients_and_skips_models_without_one() -> None:
    model = _Packs()
    prepack.prepare(model)
    assert model.calls == 1 and model.grad_on is False
    assert torch.equal(model.weight_t, model.linear.weight.t())
    prepack.prepare(torch.nn.Linear(2, 2))  # no hook: nothing happens


def test_a_hook_that_is_not_a_method_is_a_clear_error() -> None:
    class NotCallable(torch.nn.Module):
        prepare_weights = 3

    with pytest.raises(TypeError, match="must be a method taking no arguments"):
        prepack.prepare(NotCallable())


def test_the_recorder_names_operators_on_weights_alone_not_on_inputs() -> None:
    model = _Packs()
    x = torch.randn(2, 4)
    recorder = prepack.WeightOpRecorder()
    recorder.watch(prepack.weight_storages(model), [x])
    with torch.no_grad(), recorder:
        model.linear.weight.t().contiguous()  # weights alone: named
        x.t().contiguous()  # the input: plain torch_fallback, never called prepacking
        torch.nn.functional.linear(x, model.linear.weight)  # input and weight
    assert recorder.on_weights == {"aten::clone": 1}
    assert recorder.counts.get("aten::clone") == 2 and recorder.counts.get("aten::mm") == 1
    evidence = prepack.evidence(recorder.on_weights, "shape default, trial 1")
    assert evidence[0][0] == "torch_fallback" and "prepare_weights" in evidence[0][1]
    assert prepack.evidence({}, "anywhere") == []


class _PacksOnlyInTheHook(torch.nn.Module):
    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(k, n)

    def prepare_weights(self) -> None:
        self.weight_t = self.linear.weight.t()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_empty(x.shape[0], self.weight_t.shape[1])


def test_the_compile_only_drive_calls_the_hook_before_forward() -> None:
    from agentforge.evaluator.worker import cuda_lookalike

    progress = cuda_lookalike.drive(_PacksOnlyInTheHook, [6, 5], [torch.randn(3, 6)], "sm_90a")
    assert progress == {"reached": "forward", "stopped": ""}
