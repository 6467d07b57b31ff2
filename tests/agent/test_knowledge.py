"""Technique notes chosen by the task's tags, roofline class and backend within a token budget, and
contrastive exemplars retrieved from a real results store (SQLite), both reaching the coder's
prompt and the report, and both switchable off."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentforge.agent.knowledge import (
    NOTES_TOKENS,
    Knowledge,
    load_notes,
    select_notes,
    task_tags,
)
from agentforge.agent.run import optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings

ATTENTION = '''
import torch.nn.functional as F
TAGS = ["attention", "causal", "compute-bound"]
class Model:
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''
KB_CONV = '''
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3)
    def forward(self, x):
        return torch.relu(self.conv(x))
'''


def test_every_note_is_well_formed_and_fits_the_budget():
    notes = load_notes()
    assert len(notes) >= 9
    for note in notes:
        assert note.backends and set(note.backends) <= {"cpu", "cuda", "triton"}, note.name
        assert note.tags and note.classes <= {"memory-bound", "compute-bound"}, note.name
        assert note.text.startswith("### ") and note.tokens < NOTES_TOKENS // 2, note.name
    covered = {(b, t) for n in notes for b in n.backends for t in n.tags}
    for op in ("elementwise", "reduction", "gemm", "attention", "conv", "norm", "fusion"):
        assert ("cuda", op) in covered, op
    for op in ("elementwise", "reduction", "gemm", "conv", "norm", "fusion"):
        assert ("cpu", op) in covered, op


def test_notes_follow_tags_backend_and_roofline_class(kernels):
    notes = load_notes()
    relu = task_tags(kernels.TASK)
    assert "elementwise" in relu
    chosen = [n.name for n in select_notes(notes, "cpu", relu, "memory-bound")]
    assert chosen[0] == "cpu_elementwise" and all(name.startswith("cpu_") for name in chosen)
    attention = task_tags(ATTENTION)
    assert {"attention", "causal", "compute-bound"} <= attention
    assert select_notes(notes, "cuda", attention, None)[0].name == "cuda_attention"
    assert select_notes(notes, "triton", attention, None)[0].name == "cuda_attention"
    conv = task_tags(KB_CONV)  # KernelBench's format has no TAGS: the reference's words tell
    assert {"conv", "elementwise"} <= conv
    assert "cpu_conv" in [n.name for n in select_notes(notes, "cpu", conv, None)]
    # The roofline class ranks a note up: a task tagged gemm and fusion gets the GEMM note first
    # when compute-bound, a memory-bound note first when memory-bound.
    mixed = {"gemm", "fusion"}
    assert select_notes(notes, "cpu", mixed, "compute-bound")[0].name == "cpu_gemm"
    first = select_notes(notes, "cpu", mixed, "memory-bound")[0]
    assert first.name != "cpu_gemm" and "memory-bound" in first.classes
    # The budget holds: never more text than it allows.
    tight = select_notes(notes, "cpu", relu | conv | mixed | {"reduction", "norm"}, None, budget_tokens=400)
    assert len(tight) >= 1 and sum(n.tokens for n in tight) <= 400


def _store_result(kernels, task_name: str, tag: str, us: float, backend: str = "cpu"):
    from agentforge.candidate import Candidate

    source = kernels.fake_kernel(tag, us=us)
    result = kernels.fake_evaluate(SimpleNamespace(name=task_name), Candidate(source, backend))
    return dataclasses.replace(result, candidate_meta={"source": source})


def test_exemplars_are_a_contrastive_pair_from_the_store(tmp_path, kernels):
    from agentforge.store.store import ResultsStore

    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = ResultsStore(url)
    store.ensure_entry("e", kind="agent")
    rows = [("relu_task", "fast", 20.0), ("relu_task", "slow", 80.0), ("relu_task", "mid", 40.0),
            ("unrelated_gemm", "gemm", 5.0)]
    for i, (task, tag, us) in enumerate(rows):
        store.add_evaluation(f"k{i}", entry="e", suite="s", task=task, track="hardened",
                             result=_store_result(kernels, task, tag, us))
    store.add_evaluation("cuda", entry="e", suite="s", task="relu_task", track="hardened",
                         result=_store_result(kernels, "relu_task", "cudaone", 1.0, backend="cuda"))
    store.close()
    settings = Settings(results_url=url)
    task = SimpleNamespace(name="relu_task", source=kernels.TASK)
    knowledge = Knowledge.for_run(task, "cpu", settings, skills=False)
    assert [round(e.speedup, 1) for e in knowledge.exemplars] == [5.0, 1.2]  # fastest and slowest, cpu only
    text, used = knowledge({"base": None})
    assert "Technique notes" not in text
    assert "Kernel A: task relu_task, 5.00x vs eager" in text and "tag=fast" in text
    assert "Kernel B: task relu_task, 1.25x vs eager" in text and "tag=slow" in text
    assert [e["speedup"] for e in used["exemplars"]] == [5.0, 1.25] and used["notes"] == []

    missing = tmp_path / "absent.db"
    none = Knowledge.for_run(task, "cpu", Settings(results_url=f"sqlite:///{missing}"), skills=False)
    assert none.exemplars == [] and "no accepted kernel" in none.exemplar_note
    assert not missing.exists()  # looking did not create a store
    assert Knowledge.for_run(task, "cpu", settings, skills=False, exemplars=False) is None


def test_notes_and_exemplars_reach_the_coder_and_the_report(tmp_path, relu_task, kernels):
    from agentforge.store.store import ResultsStore

    url = f"sqlite:///{tmp_path / 'results.db'}"
    with ResultsStore(url) as store:
        store.ensure_entry("e", kind="agent")
        for i, us in enumerate((10.0, 60.0)):
            store.add_evaluation(f"k{i}", entry="e", suite="s", task="relu_task", track="hardened",
                                 result=_store_result(kernels, "relu_task", f"old{i}", us))
    settings = Settings(runs_dir=str(tmp_path / "runs"), results_url=url)
    settings.eval.backend = "cpu"
    settings.agent.max_rounds = 1
    provider = kernels.FakeProvider([kernels.fenced(kernels.fake_kernel("new", us=30))])
    summary = optimize(str(relu_task), settings, provider=provider, evaluate=kernels.fake_evaluate)
    assert provider.prompts and summary.history[0]["knowledge"]["notes"][0] == "cpu_elementwise"
    report = Path(summary.outputs["report"]).read_text()
    assert "`cpu_elementwise` (1 prompts)" in report
    assert "from relu_task (10.00x vs eager)" in report and "(1.67x vs eager)" in report

    off = Settings(runs_dir=str(tmp_path / "runs2"), results_url=url)
    off.eval.backend, off.agent.max_rounds = "cpu", 1
    provider = kernels.FakeProvider([kernels.fenced(kernels.fake_kernel("new", us=30))])
    summary = optimize(str(relu_task), off, RunSpec(skills=False, exemplars=False), provider=provider,
                       evaluate=kernels.fake_evaluate)
    assert "knowledge" not in summary.history[0]
    report = Path(summary.outputs["report"]).read_text()
    assert "switched off (--no-skills)" in report and "switched off (--no-exemplars)" in report


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_coder_system_prompt_carries_the_notes(tmp_path, relu_task, kernels, backend):
    settings = Settings(runs_dir=str(tmp_path / "runs"), results_url=f"sqlite:///{tmp_path / 'none.db'}")
    settings.eval.backend = backend
    settings.eval.device = "cpu" if backend == "cpu" else "cuda:0"
    knowledge = Knowledge.for_run(SimpleNamespace(name="relu_task", source=kernels.TASK), backend, settings)
    text, used = knowledge({"base": None})
    assert used["notes"][0] == ("cpu_elementwise" if backend == "cpu" else "cuda_memory_bound")
    assert text.startswith("## Technique notes")
