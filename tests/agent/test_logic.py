"""Keep-best, revert and stop rules of the loop, with a fake provider and a fake evaluation (the
real ones are exercised in test_loop.py): every number here is chosen, so every branch is pinned."""

from __future__ import annotations

from pathlib import Path

from agentforge.agent.run import optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings


def _run(tmp_path: Path, relu_task: Path, kernels, coder: list[str], judge: list[str] | None = None,
         **kw):
    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    agent = {k: kw.pop(k) for k in list(kw) if hasattr(settings.agent, k)}
    for key, value in agent.items():
        setattr(settings.agent, key, value)
    provider = kernels.FakeProvider([kernels.fenced(c) for c in coder], judge)
    spec = RunSpec(review=kw.pop("review", False))
    summary = optimize(str(relu_task), settings, spec, provider=provider, evaluate=kernels.fake_evaluate, **kw)
    return summary, provider


def test_speed_of_light_stop(tmp_path, relu_task, kernels):
    summary, _ = _run(tmp_path, relu_task, kernels, [
        kernels.fake_kernel("a", us=50, sol=0.5), kernels.fake_kernel("b", us=20, sol=0.97),
        kernels.fake_kernel("c", us=10)])
    assert summary.rounds == 2 and summary.stop_reason.startswith("speed of light")
    assert summary.best["round"] == 2


def test_revert_to_best_after_repeated_failed_repairs(tmp_path, relu_task, kernels):
    good = kernels.fake_kernel("good", us=50)
    summary, provider = _run(tmp_path, relu_task, kernels, [
        good, kernels.fake_kernel("bad1", status="compile_error"),
        kernels.fake_kernel("bad2", status="compile_error"), kernels.fake_kernel("next", us=40)],
        max_rounds=4, max_failed_repairs=2)
    outcomes = [r["outcome"] for r in summary.history]
    assert "reverted to the best kernel (round 1)" in outcomes[2]
    coder_prompts = [p for role, p in provider.prompts if role == "coder"]
    assert "The current kernel" in coder_prompts[3] and "tag=good" in coder_prompts[3]
    assert [r["mode"] for r in summary.history] == ["initial", "optimise", "repair", "optimise"]
    assert summary.best["round"] == 4


def test_much_slower_candidate_is_not_kept_as_base(tmp_path, relu_task, kernels):
    summary, provider = _run(tmp_path, relu_task, kernels, [
        kernels.fake_kernel("fast", us=10), kernels.fake_kernel("slow", us=40),
        kernels.fake_kernel("ok", us=12)], max_rounds=3)
    assert summary.history[1]["outcome"].startswith("much slower than the best")
    coder_prompts = [p for role, p in provider.prompts if role == "coder"]
    assert "tag=fast" in coder_prompts[2].split("## Its measurements")[0]
    assert summary.history[2]["outcome"] == "kept as base"  # slower than best, within the ratio
    assert summary.best["round"] == 1


def test_plateau_stop_ignores_noise_sized_gains(tmp_path, relu_task, kernels):
    summary, _ = _run(tmp_path, relu_task, kernels, [
        kernels.fake_kernel("a", us=10), kernels.fake_kernel("b", us=9.95), kernels.fake_kernel("c", us=9.9),
        kernels.fake_kernel("d", us=5)], plateau_rounds=2)
    assert summary.rounds == 3 and summary.stop_reason.startswith("plateau")
    assert summary.best["round"] == 3  # still the fastest, though not a real improvement


def test_malformed_judge_gives_a_fallback_verdict(tmp_path, relu_task, kernels):
    summary, provider = _run(tmp_path, relu_task, kernels, [
        kernels.fake_kernel("a", us=10), kernels.fake_kernel("b", us=9)],
        judge=["```json\n{\"mode\": \"optimise\", \"bottleneck\": 3}\n```"], max_rounds=2)
    coder_prompts = [p for role, p in provider.prompts if role == "coder"]
    assert "not diagnosed" in coder_prompts[1]
    assert summary.history[1]["verdict"].startswith("optimise:")


def test_review_pauses_until_a_person_answers(tmp_path, relu_task, kernels):
    summary, _ = _run(tmp_path, relu_task, kernels, [kernels.fake_kernel("a", us=10)], max_rounds=1,
                      review=True)
    assert summary.status == "awaiting_review" and summary.outputs["report"] is None
    asked: list[dict] = []
    resumed = optimize(None, Settings(runs_dir=str(tmp_path / "runs")), resume=summary.run_id,
                       provider=kernels.FakeProvider([]), evaluate=kernels.fake_evaluate,
                       approve=lambda payload: asked.append(payload) or True)
    assert resumed.status == "finished" and resumed.approved is True
    assert asked[0]["best_round"] == 1
    assert "approved by a person" in Path(resumed.outputs["report"]).read_text()


def test_a_provider_that_fails_for_good_ends_the_run_cleanly(tmp_path, relu_task, kernels):
    from agentforge.llm.base import ProviderError

    class Down(kernels.FakeProvider):
        def complete(self, *args, **kw):
            raise ProviderError("openai gpt-4.1 failed after 5 retries (server error 503)")

    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    summary = optimize(str(relu_task), settings, provider=Down([]), evaluate=kernels.fake_evaluate)
    assert summary.status == "finished" and "503" in summary.stop_reason
    assert summary.rounds == 0 and Path(summary.outputs["report"]).is_file()
