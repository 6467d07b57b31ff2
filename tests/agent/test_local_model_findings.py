"""What a small local model exposed in the loop (issue 19, finding 6), with a fake provider and a
fake evaluation so that every branch is chosen: advice that names what is missing, resubmitted
code pointed out and not evaluated again, failed repairs that do not count the initial round, the
prompts naming the shapes checked and timed, and what is in flight heard as it starts."""

from __future__ import annotations

from pathlib import Path

from agentforge.agent.run import optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings

NO_KERNEL = '''import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def _run(tmp_path: Path, relu_task: Path, kernels, coder: list[str], **kw):
    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    for key in [k for k in kw if hasattr(settings.agent, k)]:
        setattr(settings.agent, key, kw.pop(key))
    evaluated: list[str] = []

    def evaluate(task, candidate):
        evaluated.append(candidate.code_hash)
        return kernels.fake_evaluate(task, candidate)

    provider = kernels.FakeProvider([kernels.fenced(c) for c in coder])
    spec = RunSpec(shapes=kw.pop("shapes", ()))
    summary = optimize(str(relu_task), settings, spec, provider=provider, evaluate=evaluate, **kw)
    coder_prompts = [p for role, p in provider.prompts if role == "coder"]
    return summary, coder_prompts, evaluated


def test_static_advice_names_the_missing_kernel_when_model_new_is_defined(tmp_path, relu_task, kernels):
    summary, prompts, evaluated = _run(tmp_path, relu_task, kernels, [NO_KERNEL, kernels.fake_kernel("k")],
                                       max_rounds=2)
    assert summary.history[0]["status"] == "static_error" and len(evaluated) == 1
    diagnosis = prompts[1].split("## The judge's diagnosis")[1].split("##")[0]
    assert "`ModelNew` is defined, but the module builds no cpu kernel" in diagnosis
    assert "load_cpp" in diagnosis and "ModelNew.forward" in diagnosis
    assert "defining `class ModelNew`" not in diagnosis  # not the generic advice


def test_static_advice_without_model_new_names_the_classes_found():
    from agentforge.agent.nodes import check_source

    error, fix = check_source("# class ModelNew comes later\nclass Model:\n    pass\n", "cpu")
    assert error == "the module defines no `class ModelNew` (it defines `Model`)"
    assert fix is not None and "`class ModelNew(torch.nn.Module)`" in fix
    assert check_source("class ModelNew:\n    pass\n# load_cpp\n", "cpu") == (None, None)


def test_resubmitted_code_is_pointed_out_and_not_evaluated_again(tmp_path, relu_task, kernels):
    first, second = kernels.fake_kernel("a", us=50), kernels.fake_kernel("b", us=40)
    summary, prompts, evaluated = _run(tmp_path, relu_task, kernels, [first, first, second], max_rounds=3)
    assert [r["status"] for r in summary.history] == ["ok", "duplicate", "ok"]
    assert len(evaluated) == 2 and len(set(evaluated)) == 2
    repeated = summary.history[1]
    assert repeated["code_hash"] == summary.history[0]["code_hash"]
    assert "identical to round 1's code" in repeated["outcome"]
    assert f"resubmitted code {repeated['code_hash']} unchanged" in prompts[2]
    assert "resubmitted" not in prompts[1]
    assert summary.best["round"] == 3


def test_failed_repairs_do_not_count_the_initial_round(tmp_path, relu_task, kernels):
    bad = [kernels.fake_kernel(f"bad{i}", status="compile_error") for i in range(4)]
    summary, _, _ = _run(tmp_path, relu_task, kernels, bad, max_rounds=4, max_failed_repairs=3)
    outcomes = [r["outcome"] for r in summary.history]
    assert [r["mode"] for r in summary.history] == ["initial", "repair", "repair", "repair"]
    assert "failed repairs" not in " ".join(outcomes[:3])  # round 1 was no repair: only 2 so far
    assert "3 failed repairs and no correct kernel yet" in outcomes[3]


def test_prompts_say_which_shape_is_checked_and_which_is_timed(tmp_path, relu_task, kernels):
    _, prompts, _ = _run(tmp_path, relu_task, kernels, [kernels.fake_kernel("a")], max_rounds=1)
    assert "checked on the shape variants 'default', 'odd'; only 'default' is timed" in prompts[0]
    _, prompts, _ = _run(tmp_path / "b", relu_task, kernels, [kernels.fake_kernel("a")], max_rounds=1,
                         shapes=("odd",))
    assert "checked on the shape variants 'odd'; only 'odd' is timed" in prompts[0]


def test_what_is_in_flight_is_heard_as_it_starts(tmp_path, relu_task, kernels):
    heard: list[str] = []
    _run(tmp_path, relu_task, kernels, [kernels.fake_kernel("a"), kernels.fake_kernel("b")], max_rounds=2,
         on_activity=heard.append)
    assert heard == ["waiting for the model (coder, round 1)", "evaluating round 1 in the sandbox",
                     "waiting for the model (judge, round 1)", "waiting for the model (coder, round 2)",
                     "evaluating round 2 in the sandbox"]


def test_live_view_shows_the_call_in_flight_with_its_clock_and_the_runs_elapsed_time(monkeypatch):
    from rich.console import Console

    from agentforge.cli import optimize_cmd

    clock = [1000.0]
    monkeypatch.setattr(optimize_cmd.time, "monotonic", lambda: clock[0])
    view = optimize_cmd._LiveView(enabled=False)
    view.activity("waiting for the model (coder, round 2)")
    clock[0] += 75
    assert view.doing() == "waiting for the model (coder, round 2), 1:15"
    console = Console(width=200, record=True)
    console.print(view._table())
    text = console.export_text()
    assert "elapsed" in text and "waiting for the model (coder, round 2), 1:15" in text
    view.update({"stage": "coder", "round": 2})
    assert view.doing() == "coder done"  # the call ended: the last finished stage again
