"""`make gpu-check` without a GPU (its plan, exit 0), its resumable bookkeeping with stand-in
steps, and the rule that what runs on a bare GPU image imports only the standard library, torch,
numpy, triton, cupy and the project."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", REPO / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_make_gpu_check_without_a_gpu_prints_its_plan_and_exits_0() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: make gpu-check would measure")
    proc = subprocess.run(["make", "-s", "gpu-check"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for step in ("doctor", "gpu_tests", "timing_fidelity", "isolation", "profile", "reference"):
        assert f"  {step} " in proc.stdout
    assert "total about" in proc.stdout and "results/gpu/<gpu>/gpu_check.json" in proc.stdout


def test_the_first_call_proves_the_path_in_about_9_minutes_and_the_reference_kernels_follow() -> None:
    """One device call of at most 10 minutes: doctor, fidelity, isolation, profile and the gpu tests;
    the reference kernels (70, eager each, torch.compile on a sample) in the calls after it."""
    gpu_check = _script()
    calls = gpu_check.plan_calls()
    assert calls[0] == ["doctor", "timing_fidelity", "isolation", "profile", "gpu_tests"]
    first = sum(s.estimate_s for s in gpu_check.STEPS if s.name in calls[0])
    assert first <= gpu_check.FIRST_CALL_S - gpu_check.MARGIN_S <= 9 * 60
    assert all(names == ["reference"] for names in calls[1:]) and len(calls) >= 3
    reference = next(s for s in gpu_check.STEPS if s.name == "reference")
    assert reference.estimate_s >= 70 * gpu_check.REF_EAGER_S  # not the 360 s that 70 sandboxes never fit


def test_torch_compile_runs_on_a_sample_spanning_both_backends() -> None:
    gpu_check = _script()
    from agentforge.kernel_library import select_kernels

    kernels = select_kernels("h100", None)
    sample = gpu_check.compile_sample(kernels)
    backends = {k.backend for k in kernels if f"{k.gpu}/{k.task_name}" in sample}
    assert len(sample) == gpu_check.COMPILE_SAMPLE and backends == {"cuda", "triton"}
    assert gpu_check.compile_sample(kernels) == sample  # the same sample in every call


def _stand_in(gpu_check: Any, monkeypatch, tmp_path: Path, steps: tuple[Any, ...]) -> None:
    monkeypatch.setattr(gpu_check, "STEPS", steps)
    monkeypatch.setattr(gpu_check, "REPO", tmp_path)
    monkeypatch.setattr(gpu_check, "ensure_importable", lambda: None)
    monkeypatch.setattr(gpu_check, "gpu_identity", lambda: {"gpu": "Test GPU", "slug": "testgpu", "driver": "1.0",
                                                            "torch": "x", "date": "2026-11-26T00:00:00+00:00"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_steps_done_are_skipped_by_the_next_call_and_a_step_over_budget_waits(tmp_path: Path, monkeypatch) -> None:
    gpu_check = _script()
    calls: list[str] = []

    def make(name: str) -> Any:
        def run(state: dict[str, Any], deadline: float) -> dict[str, Any]:
            calls.append(name)
            return {"ok": True}
        return run

    steps = (gpu_check.Step("doctor", 1, "first", make("doctor")),
             gpu_check.Step("timing_fidelity", 400, "second", make("timing_fidelity")))
    _stand_in(gpu_check, monkeypatch, tmp_path, steps)
    out = tmp_path / "out"
    assert gpu_check.main(["--budget-s", "100", "--out", str(out)]) == 0
    assert calls == ["doctor"]  # the second step would not finish in 100 s
    state = json.loads((out / "state.json").read_text())
    assert list(state["steps"]) == ["doctor"]
    assert gpu_check.main(["--budget-s", "1000"]) == 0
    assert calls == ["doctor", "timing_fidelity"]  # doctor was done: not run again
    report = (tmp_path / "results" / "gpu" / "testgpu" / "gpu_check.md").read_text()
    assert "Test GPU" in report and "driver 1.0" in report and "2026-11-26" in report
    assert "| timing_fidelity | ok |" in report


def test_what_runs_on_the_gpu_machine_imports_no_cli_or_agent_package() -> None:
    code = ("import sys, importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('g', {str(REPO / 'scripts' / 'gpu_check.py')!r})\n"
            "g = importlib.util.module_from_spec(spec); sys.modules['g'] = g; spec.loader.exec_module(g)\n"
            "import agentforge.evaluator.api, agentforge.evaluator.judge.pipeline, agentforge.sandbox.child\n"
            "import agentforge.evaluator.worker.candidate_side, agentforge.evaluator.worker.profile_target\n"
            "import agentforge.doctor, agentforge.kernel_library\n"
            "import agentforge.sandbox.process_backend\n"
            "g.print_plan()\n"
            "bad = {'typer', 'rich', 'pydantic', 'langgraph', 'sqlalchemy', 'openai', 'anthropic', 'matplotlib',\n"
            "       'ray', 'docker', 'trl', 'transformers', 'einops'}\n"
            "print(sorted(bad & {m.split('.')[0] for m in sys.modules}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stderr[-2000:]


def test_a_call_cut_short_still_leaves_its_state_and_reports_in_out(tmp_path: Path, monkeypatch) -> None:
    """The device machine goes back bare: what a call finished must be in --out even when a later
    step is interrupted, and a failed step's report row must not break the Markdown."""
    gpu_check = _script()

    def broken(state: dict[str, Any], deadline: float) -> dict[str, Any]:
        raise RuntimeError("no isolation here")

    def interrupted(state: dict[str, Any], deadline: float) -> dict[str, Any]:
        assert json.loads((out / "state.json").read_text())["steps"]["isolation"]["ok"] is False  # saved already
        raise KeyboardInterrupt

    out = tmp_path / "out"
    _stand_in(gpu_check, monkeypatch, tmp_path, (
        gpu_check.Step("doctor", 1, "first", lambda state, deadline: {"ok": True}),
        gpu_check.Step("isolation", 1, "raises", broken),
        gpu_check.Step("profile", 1, "interrupted", interrupted)))
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(["--budget-s", "100", "--out", str(out)])
    report = (out / "gpu_check.md").read_text()
    assert "| doctor | ok |" in report and "| isolation | FAILED | error: RuntimeError: no isolation here |" in report
    assert "| profile | pending |" in report


def test_the_closing_line_counts_failures_apart_from_what_is_done(tmp_path: Path, monkeypatch, capsys) -> None:
    gpu_check = _script()
    _stand_in(gpu_check, monkeypatch, tmp_path, (
        gpu_check.Step("doctor", 1, "ok", lambda state, deadline: {"ok": True}),
        gpu_check.Step("isolation", 1, "fails", lambda state, deadline: {"ok": False, "modes": {}}),
        gpu_check.Step("reference", 1, "pending", lambda state, deadline: {"ok": False, "pending": True})))
    assert gpu_check.main(["--budget-s", "100"]) == 1  # a failed step fails the call
    assert "gpu-check: 1 ok, 1 failed (isolation), 1 pending (reference: run again)" in capsys.readouterr().out


def test_a_call_with_only_pending_steps_left_exits_0(tmp_path: Path, monkeypatch) -> None:
    gpu_check = _script()
    _stand_in(gpu_check, monkeypatch, tmp_path, (
        gpu_check.Step("doctor", 1, "ok", lambda state, deadline: {"ok": True}),
        gpu_check.Step("gpu_tests", 1, "pending", lambda state, deadline: {"ok": False, "pending": True})))
    assert gpu_check.main(["--budget-s", "100"]) == 0


def test_a_timed_out_runs_captured_bytes_are_read_as_text() -> None:
    gpu_check = _script()
    assert gpu_check._text(b"FAILED tests/x.py::t\n") == "FAILED tests/x.py::t\n"
    assert gpu_check._text(None) == "" and gpu_check._text("ok") == "ok"


def test_no_run_is_given_more_than_the_call_has_left() -> None:
    gpu_check = _script()
    import time

    assert gpu_check.left(time.monotonic() + 1000, 180.0) == 180.0
    assert 75 <= gpu_check.left(time.monotonic() + 100, 180.0) <= 80  # 100 s left, less the margin for reports
    assert gpu_check.left(time.monotonic() - 5, 180.0) == 1.0


# ----- the gpu tests: a run stopped at its limit is pending, and the next call goes on ----------
MARK = "@pytest.mark." + "gpu"  # split: gpu_test_files() looks for the marker's text
GPU_TESTS = '''
import os
import pytest

MARK
def test_quick():
    assert True

MARK
def test_fails():
    assert 1 == 2

MARK
def test_slow():
    import time
    if not os.path.exists(os.environ["GO_FAST"]):
        time.sleep(600)
'''.replace("MARK", MARK)


def test_gpu_tests_past_their_limit_are_pending_and_the_next_call_runs_only_the_rest(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    import time

    gpu_check = _script()
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_marked.py").write_text(GPU_TESTS)
    (repo / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a gpu test\n")
    monkeypatch.setattr(gpu_check, "REPO", repo)
    monkeypatch.setattr(gpu_check, "WORK", tmp_path / "work")
    monkeypatch.setenv("GO_FAST", str(tmp_path / "go-fast"))
    state: dict[str, Any] = {}
    # 20 s for the first call: its pytest reaches test_slow in about 4 s on the 2-core VM (5x margin
    # for a loaded CI machine), then waits there until the limit ends it
    first = gpu_check.step_gpu_tests(state, time.monotonic() + gpu_check.MARGIN_S + 20)
    assert first["pending"] is True and first["ok"] is False, first
    assert state["gpu_tests_done"] == {"tests/test_marked.py::test_quick": "PASSED",
                                       "tests/test_marked.py::test_fails": "FAILED"}
    (tmp_path / "go-fast").touch()
    second = gpu_check.step_gpu_tests(state, time.monotonic() + gpu_check.MARGIN_S + 120)
    assert "pending" not in second and second["ok"] is False  # test_fails failed in the first call
    assert second["failures"] == ["tests/test_marked.py::test_fails"]
    assert state["gpu_tests_done"]["tests/test_marked.py::test_slow"] == "PASSED"
    assert "2 passed" in second["summary"] and "1 failed" in second["summary"]


def test_gpu_tests_share_gpu_checks_warm_build_cache() -> None:
    gpu_check = _script()
    env = gpu_check.gpu_tests_env()
    assert env["AGENTFORGE_TEST_CACHE_DIR"] == str(gpu_check.WORK / "cache")
    argv = gpu_check.gpu_tests_argv(["tests/a.py"], {"tests/a.py::t": "PASSED"}, gpu_check.PER_TEST_TIMEOUT_S)
    assert argv[-3:] == ["--timeout=280", "--deselect", "tests/a.py::t"] and "-v" in argv
    exploits = (REPO / "tests" / "exploits" / "test_exploits.py").read_text()
    assert 'os.environ.get("AGENTFORGE_TEST_CACHE_DIR")' in exploits  # the gpu cases' sandboxes use it


# ----- what an evaluation row keeps ---------------------------------------------------------------
def test_an_evaluation_row_keeps_each_flags_rule_evidence_the_stage_seconds_and_the_shape() -> None:
    """An H200 call ended `integrity_flag` without saying which rule: the row now says."""
    from agentforge.evaluator.result import EvalProvenance, EvalResult, Flag, Stage, Status

    module = _script()
    result = EvalResult(task_name="t", candidate_hash="h", backend="cuda", status=Status.INTEGRITY_FLAG,
                        stage=Stage.TIMING, flags=(Flag("output_alias", "returned an input's storage"),
                                                   Flag("torch_fallback", "ran aten::softmax", "audit")),
                        provenance=EvalProvenance(sandbox="process+unshare(...)",
                                                  stage_seconds={"correctness": 2.345, "timing": 1.0}))
    row = module.evaluation_row("h100/level1/x", "small", result, 3.21)
    assert row["shape"] == "small" and row["seconds"] == 3.2
    assert row["flags"] == [{"rule": "output_alias", "severity": "reject", "evidence": "returned an input's storage"},
                            {"rule": "torch_fallback", "severity": "audit", "evidence": "ran aten::softmax"}]
    assert row["stage_seconds"] == {"correctness": 2.35, "timing": 1.0}
    detail = module._detail("isolation", {"modes": {"unshare": row}})
    assert "flags: output_alias, torch_fallback" in detail


def test_the_sandbox_steps_evaluate_a_reference_task_on_a_shape_smaller_than_its_default() -> None:
    from agentforge.kernel_library import kernel_task, select_kernels

    kernel = next(k for k in select_kernels("h100", None) if k.task_name == "level1/log_softmax_vocab")
    task = kernel_task(kernel)
    small = task.smallest_shape()
    assert small != "default"
    assert task.input_numel(small) < task.input_numel("default")


# ----- clocks, and a CPU-only torch on a machine with a GPU -----------------------------------------
def test_the_sm_clock_is_read_from_nvidia_smis_csv() -> None:
    gpu_check = _script()
    assert gpu_check.parse_sm_clocks("1980, 1980\n") == {"sm_mhz": 1980, "sm_max_mhz": 1980}
    assert gpu_check.parse_sm_clocks("[N/A], 1980") is None and gpu_check.parse_sm_clocks("") is None


def _fake_nvidia_smi(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    return folder


def test_a_cpu_only_torch_where_nvidia_smi_sees_a_gpu_is_refused_loudly(tmp_path: Path, monkeypatch,
                                                                        capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("this torch can use the GPU")
    gpu_check = _script()
    folder = _fake_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{folder}:{__import__('os').environ['PATH']}")
    assert gpu_check.main([]) == 2
    err = capsys.readouterr().err
    assert "nvidia-smi sees GPU 0: NVIDIA H100" in err and "nothing measured" in err
    assert "GPU_CHECK_PY=python3" in err
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi: the plan, exit 0
    assert gpu_check.cpu_only_refusal(torch) is None


def test_the_observer_cost_is_measured_by_the_evaluators_own_loop_on_the_cpu() -> None:
    """The same function times the chains on the GPU (head start on and off); here, once each."""
    gpu_check = _script()
    rows = gpu_check.observer_cost(torch.device("cpu"), n_ops=(3, 30), reps=5)
    assert [(r["ops"], r["head_start"]) for r in rows] == [(3, False), (30, False)]
    for row in rows:
        assert row["plain_us"] > 0 and row["observed_us"] > 0
        assert abs(row["added_us"] - (row["observed_us"] - row["plain_us"])) <= 0.011  # each rounded to 0.01


def test_a_step_longer_than_a_call_is_planned_in_a_call_of_its_own(monkeypatch) -> None:
    gpu_check = _script()
    run = lambda state, deadline: {"ok": True}  # noqa: E731
    monkeypatch.setattr(gpu_check, "STEPS", (gpu_check.Step("doctor", 100, "", run),
                                             gpu_check.Step("isolation", 900, "", run),
                                             gpu_check.Step("reference", 700, "", run)))
    assert gpu_check.plan_calls(540) == [["doctor"], ["isolation"], ["reference"], ["reference"]]
