"""Prompt builders: contrastive (score buckets, measured speedups, analyse-design-code) and
multi-turn (verdict summaries, never earlier reasoning)."""

from __future__ import annotations

import pytest
from agentforge.rl.prompts import (
    InMemoryHistory,
    ScoredKernel,
    bucket_of,
    contrastive_prompt,
    multi_turn_prompt,
    pick_contrastive,
    plain_prompt,
    render,
)

TASK = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
KERNELS = [
    ScoredKernel("# k_fast_a", 2.5, "ok"),
    ScoredKernel("# k_fast_b", 2.2, "ok"),
    ScoredKernel("# k_par", 1.0, "ok"),
    ScoredKernel("# k_slow", 0.5, "ok"),
    ScoredKernel("# k_wrong", None, "mismatch"),
    ScoredKernel("# k_good", 1.3, "ok"),
]


def test_buckets():
    assert [bucket_of(k) for k in KERNELS] == [4, 4, 2, 1, 0, 3]


def test_pick_draws_from_distinct_buckets_best_first():
    chosen = pick_contrastive(KERNELS, k=3, seed=1)
    assert len({bucket_of(k) for k in chosen}) == 3
    assert [bucket_of(k) for k in chosen] == [4, 3, 2]
    five = pick_contrastive(KERNELS, k=5, seed=1)
    assert sorted(bucket_of(k) for k in five) == [0, 1, 2, 3, 4]
    assert five[-1].status == "mismatch"  # rejected kernels come last
    assert pick_contrastive(KERNELS, k=3, seed=1) == chosen  # deterministic


def test_contrastive_prompt_shows_speedups_and_asks_for_analysis_design_code():
    history = InMemoryHistory({"level1/relu": KERNELS})
    prompt = contrastive_prompt("level1/relu", TASK, history.scored_kernels("level1/relu"), k=4, seed=0)
    text = prompt.text
    assert "1.30x vs eager (faster)" in text and "0.50x vs eager (slower)" in text
    assert "1.00x vs eager (on par)" in text and "rejected (" not in text
    assert text.index("Analysis") < text.index("Design") < text.index("Code")
    assert "return torch.relu(x)" in text
    assert "{" not in text.replace("{x", "")  # every placeholder filled
    assert prompt.template == "contrastive" and len(prompt.version) == 12
    assert text.count("### Kernel") == 4


def test_contrastive_falls_back_to_plain_without_history():
    assert contrastive_prompt("level1/relu", TASK, []).template == "plain"
    assert "ModelNew" in plain_prompt("level1/relu", TASK, "cpu").text


def test_multi_turn_prompt_keeps_verdicts_not_reasoning():
    turns = [
        ScoredKernel("# attempt one", None, "compile_error", summary="level1/relu [cuda] compile_error at build"),
        ScoredKernel("# attempt two", 1.4, "ok", summary="level1/relu [cuda] ok at done, 1.40x vs eager"),
    ]
    text = multi_turn_prompt("level1/relu", TASK, turns).text
    assert "### Attempt 1" in text and "### Attempt 2" in text
    assert "compile_error at build" in text and "1.40x vs eager" in text
    assert text.index("# attempt one") < text.index("# attempt two")


def test_render_is_strict_about_placeholders():
    with pytest.raises(KeyError, match="takes"):
        render("plain", task_name="x")


def test_store_history_reads_scored_kernels_from_the_results_store(tmp_path, make_result):
    import dataclasses

    from agentforge.evaluator.result import Status
    from agentforge.rl.prompts import StoreHistory

    from agentforge.store.store import ResultsStore

    kernel_file = tmp_path / "relu_fast.py"
    kernel_file.write_text("# fast relu kernel\n")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with ResultsStore(url) as store:
        store.ensure_entry("agent", kind="agent")
        fast = dataclasses.replace(make_result(candidate_us=50.0), candidate_meta={"file": str(kernel_file)})
        wrong = dataclasses.replace(make_result(Status.MISMATCH), candidate_meta={"source": "# wrong kernel\n"})
        gone = dataclasses.replace(make_result(), candidate_meta={"file": str(tmp_path / "deleted.py")})
        for key, result in (("a", fast), ("b", wrong), ("c", gone)):
            store.add_evaluation(key, entry="agent", suite="level1", task="level1/relu", track="hardened",
                                 result=result)
    kernels = StoreHistory(url).scored_kernels("level1/relu")
    assert [(k.source, k.speedup, k.status) for k in kernels] == [
        ("# fast relu kernel\n", 2.0, "ok"), ("# wrong kernel\n", None, "mismatch")]
    text = contrastive_prompt("level1/relu", TASK, kernels).text
    assert "2.00x vs eager" in text and "rejected (mismatch)" in text
