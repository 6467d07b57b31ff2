"""Suites from tasks/ levels, a KernelBench checkout and TOML lists; kernels folders; hold-outs."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentforge.evaluator.result import CorrectnessRecord, EvalJob, EvalProvenance, EvalResult, Stage, Status

from agentforge.leaderboard.kernels_dir import scan_kernels
from agentforge.leaderboard.suites import REDACTED_SEED, Holdout, SuiteError, load_holdout, load_suite
from agentforge.task import Task


def test_tasks_levels(tiny_tasks: Path) -> None:
    everything = load_suite("tasks", tiny_tasks)
    assert everything.task_names == ["level1/1_ReLU", "level1/2_Scale", "level2/1_ScaleAgain"]
    assert load_suite("level2", tiny_tasks).task_names == ["level2/1_ScaleAgain"]
    assert load_suite("tasks:level1", tiny_tasks).name == "tasks:level1"
    relu = everything.tasks[0]
    assert (relu.level, relu.problem_id) == (1, 1)


def test_kernelbench_checkout(tiny_tasks: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "KernelBenchRepo"
    (checkout / "KernelBench").mkdir(parents=True)
    (tiny_tasks / "level1").rename(checkout / "KernelBench" / "level1")
    (tiny_tasks / "level2").rename(checkout / "KernelBench" / "level2")
    suite = load_suite(f"kernelbench:{checkout}:level1", tmp_path / "nowhere")
    assert suite.name == "kernelbench:level1" and len(suite.tasks) == 2
    assert load_suite(f"kernelbench:{checkout}", tmp_path).name == "kernelbench:all"
    with pytest.raises(SuiteError, match="not a KernelBench checkout"):
        load_suite(f"kernelbench:{tmp_path / 'missing'}", tmp_path)


def test_toml_list(tiny_tasks: Path, tmp_path: Path) -> None:
    listing = tmp_path / "mini.toml"
    listing.write_text('root = "tasks"\ntasks = ["level1/2_Scale", "level2/1_ScaleAgain.py"]\n')
    suite = load_suite(str(listing), tmp_path / "elsewhere")
    assert suite.name == "mini" and suite.task_names == ["level1/2_Scale", "level2/1_ScaleAgain"]
    listing.write_text('name = "x"\ntasks = ["level9/nothing"]\n')
    with pytest.raises(SuiteError, match="level9/nothing"):
        load_suite(str(listing), tiny_tasks)


def test_unknown_spec_lists_the_forms(tiny_tasks: Path) -> None:
    with pytest.raises(SuiteError, match="kernelbench:PATH"):
        load_suite("bogus", tiny_tasks)


def test_scan_both_layouts(tiny_tasks: Path, kernels: Path) -> None:
    scan = scan_kernels(kernels, load_suite("tasks", tiny_tasks))
    got = [(s.task.name, s.sample) for s in scan.samples]
    assert got == [("level1/1_ReLU", 0), ("level1/1_ReLU", 1), ("level1/2_Scale", 0)]
    assert [p.name for p in scan.unmatched] == ["level_1_problem_7_sample_0_kernel.py"]


def test_holdout_adds_secret_shapes_and_seed(tiny_tasks: Path, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets" / "holdout.toml"
    secrets.parent.mkdir()
    secrets.write_text('seed = 4242\n[shapes."level1/1_ReLU"]\nodd = { N = 97 }\n')
    holdout = load_holdout(secrets)
    source = (tiny_tasks / "level1" / "1_ReLU.py").read_text()
    job = holdout.apply(EvalJob(task_name="level1/1_ReLU", task_source=source, candidate_source=""))
    assert job.correctness.base_seed == 4242
    task = Task("level1/1_ReLU", job.task_source)
    assert task.shapes["secret_odd"] == {"N": 97}
    assert task.make_inputs(seed=1, shape="secret_odd")[0].shape == (97,)
    other = holdout.apply(EvalJob(task_name="level1/2_Scale", task_source=source, candidate_source=""))
    assert other.task_source == source  # only the named task gets shapes
    assert not Holdout().active and Holdout().apply(job) is job


def test_holdout_redacts_the_seed() -> None:
    result = EvalResult(
        task_name="t", candidate_hash="h", backend="cpu", status=Status.OK, stage=Stage.DONE,
        correctness=(CorrectnessRecord(shape="default", seed=4242, passed=True),),
        provenance=EvalProvenance(track_settings={"base_seed": 4242, "trials": 5}),
    )
    clean = Holdout(seed=4242).redact(result)
    assert clean.correctness[0].seed == REDACTED_SEED
    assert "4242" not in clean.to_json()
    assert clean.provenance.track_settings == {"trials": 5}


def test_bad_holdout_file(tmp_path: Path) -> None:
    bad = tmp_path / "h.toml"
    bad.write_text('seeds = 1\n')
    with pytest.raises(SuiteError, match="unknown keys"):
        load_holdout(bad)
    assert load_holdout(None) == Holdout()
