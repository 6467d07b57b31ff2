"""Suites, a deterministic train / held-out split, the decontamination report, trainer rows."""

from __future__ import annotations

from dataclasses import replace

import pytest
from agentforge.rl.data import (
    TaskItem,
    VerifiedKernel,
    decontamination_report,
    grpo_rows,
    load_suite,
    sft_rows,
    smoke_rows,
    split,
    verify,
)
from agentforge.rl.prompts import InMemoryHistory, ScoredKernel

RELU = '''"""ReLU."""
import torch

N = 1024


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def task(name: str, op: str, suite: str = "train") -> TaskItem:
    return TaskItem(name, RELU.replace("torch.relu(x)", op), suite)


ITEMS = [task(f"level1/op{i}", f"torch.relu(x) * {i} + torch.tanh(x) - {i}") for i in range(20)]


def test_split_is_deterministic_and_independent_of_order():
    train, held = split(ITEMS, 0.2, seed=3)
    assert len(held) == 4 and len(train) == 16
    assert not {t.name for t in train} & {t.name for t in held}
    _, held2 = split(list(reversed(ITEMS)), 0.2, seed=3)
    assert {t.name for t in held2} == {t.name for t in held}
    _, other = split(ITEMS, 0.2, seed=4)
    assert {t.name for t in other} != {t.name for t in held}
    assert split(ITEMS, 0.0)[1] == []


def test_decontamination_finds_names_sources_and_near_duplicates():
    evaluation = [
        task("kb/op3", "something_else(x)", suite="kernelbench"),  # same name as a training task
        TaskItem("kb/relu_copy", "# a comment\n" + RELU.replace("torch.relu(x)", "torch.relu(x) * 5 + "
                 "torch.tanh(x) - 5"), "kernelbench"),  # op5 reformatted with a comment: same source
        task("kb/gelu", "torch.nn.functional.gelu(x)", suite="kernelbench"),  # shares the boilerplate
    ]
    report = decontamination_report(ITEMS, evaluation, threshold=0.95)
    reasons = {(o.train, o.evaluation): o.reason for o in report.overlaps}
    assert reasons[("level1/op3", "kb/op3")] == "same_name"
    assert reasons[("level1/op5", "kb/relu_copy")] == "same_source"
    assert not any(ev == "kb/gelu" for _, ev in reasons)
    assert report.contaminated == {"level1/op3", "level1/op5"}
    assert "| level1/op5 | kb/relu_copy | kernelbench | same_source |" in report.to_markdown()
    assert report.to_dict()["clean"] is False
    loose = decontamination_report(ITEMS[:1], [evaluation[2]], threshold=0.3)
    assert [o.reason for o in loose.overlaps] == ["near_duplicate"]
    assert decontamination_report(ITEMS, []).clean


def test_load_suite_reads_a_folder(tmp_path):
    folder = tmp_path / "level1"
    folder.mkdir()
    (folder / "relu.py").write_text(RELU)
    (folder / "_helper.py").write_text("x = 1\n")
    items = load_suite("level1", tmp_path)
    assert [it.name for it in items] == ["level1/relu"]


def test_rows_for_the_trainers():
    rows = grpo_rows(ITEMS[:2], backend="cpu", repeat=2)
    assert len(rows) == 4 and rows[0]["task_name"] == "level1/op0" and "CPU" in rows[0]["prompt"]
    history = InMemoryHistory({"level1/op0": [ScoredKernel("# fast", 2.0, "ok")]})
    contrastive = grpo_rows(ITEMS[:1], history=history)
    assert "2.00x vs eager" in contrastive[0]["prompt"]
    smoke = smoke_rows(3)
    assert len(smoke) == 3 and "{completion}" in smoke[0]["template"]
    kernel = VerifiedKernel("level1/op0", RELU, "class ModelNew: ...", "cuda", 1.5, "reference-kernel")
    with pytest.raises(ValueError, match="unverified"):
        sft_rows([kernel])
    sft = sft_rows([replace(kernel, verified=True)])
    assert sft[0]["completion"].startswith("```python\nclass ModelNew")


def test_verify_keeps_only_what_the_evaluator_accepts(make_result):
    from agentforge.evaluator.result import EvalJob, Status
    from agentforge.rl.rewards import build_rewarder
    from agentforge.rl.service import RewardService

    def evaluate(job):
        return make_result(Status.OK if "good" in job.candidate_source else Status.MISMATCH, candidate_us=80.0)

    service = RewardService(build_rewarder(), evaluate_fn=evaluate,
                            job_factory=lambda req, code: EvalJob(req.task_name, req.task_source, code))
    kernels = [VerifiedKernel("a", RELU, f"# {tag}\nclass ModelNew: ...", "cpu", None, "reference-kernel")
               for tag in ("good", "bad")]
    kept = verify(kernels, service)
    assert [k.source.split()[1] for k in kept] == ["good"]
    assert kept[0].verified and kept[0].speedup == 1.25


def test_smoke_rows_pair_each_task_with_its_skeleton_and_recorded_reference():
    from agentforge.rl.reference import RecordedReference

    def lookup(task):
        found = RecordedReference(2.0, "results/kernels/cpu/x/record.json", "cpu", "cpu")
        return found if task.startswith("level2") else None

    rows = smoke_rows(2, ("relu", "add_mul_relu"), lookup)
    assert [r["task_name"] for r in rows] == ["smoke/relu"] * 2 + ["level2/add_mul_relu"] * 2
    relu, fused = rows[0], rows[2]
    assert relu["prompt"] == "relu:" and relu["reference_speedup"] is None
    assert fused["prompt"] == "add_mul_relu:" and fused["reference_speedup"] == 2.0
    assert fused["reference_record"] == "record:results/kernels/cpu/x/record.json#cpu"
    assert "{completion}" in fused["template"] and "omp parallel for" in fused["template"]
    assert "class Model" in fused["task_source"] and '"cpu"' in fused["task_source"]
    with pytest.raises(KeyError, match="choose from"):
        smoke_rows(1, ("nope",))


def test_the_shipped_cpu_record_gives_the_fused_smoke_task_a_reference():
    from agentforge.rl.reference import recorded_reference, this_device

    slug, name = this_device("cpu")
    found = recorded_reference("level2/add_mul_relu", "cpu", slug, "cpu", name)
    if found is None:  # another CPU model than the record's: the tier is honestly out of reach here
        pytest.skip(f"the shipped record was measured on another CPU than {name!r}")
    assert found.speedup > 1.0 and found.source == "record:results/kernels/cpu/level2/add_mul_relu/record.json#cpu"
