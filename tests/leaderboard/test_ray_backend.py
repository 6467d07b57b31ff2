"""The Ray backend on a real local cluster: fan-out and collection, and a worker killed mid-job
is retried elsewhere with its result counted once. The node-local sandbox is replaced by a
small runner so the test measures the distribution layer, not kernel builds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    EvalJob,
    EvalProvenance,
    EvalResult,
    Stage,
    Status,
)
from agentforge.sandbox.config import SandboxConfig

from tests.fixtures.sandbox import quiet

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install agentforge[distributed])")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    import ray.cloudpickle

    # The runners below live in this test module, which Ray workers cannot import by name.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _ok(job: EvalJob, pid: int) -> EvalResult:
    return EvalResult(
        task_name=job.task_name, candidate_hash="h", backend=job.backend, status=Status.OK, stage=Stage.DONE,
        compile=CompileRecord(ok=True, backend=job.backend),
        correctness=(CorrectnessRecord(shape="default", seed=job.correctness.base_seed, passed=True),),
        provenance=EvalProvenance(host=str(pid), sandbox="fake"), candidate_meta=dict(job.candidate_meta),
    )


def echo_runner(job: EvalJob, config: SandboxConfig) -> EvalResult:
    assert config.kind == "process"  # the node runs the local process sandbox
    return _ok(job, os.getpid())


def dying_runner(job: EvalJob, config: SandboxConfig) -> EvalResult:
    """Kills its own worker process on the first attempt of each job (a lost node, an OOM kill)."""
    marks = Path(job.candidate_meta["marks"])
    with (marks / f"{job.task_name}.attempts").open("a") as fh:
        fh.write(f"{os.getpid()}\n")
    first = marks / f"{job.task_name}.first"
    if not first.exists():
        first.write_text("dying")
        os._exit(1)
    return _ok(job, os.getpid())


def always_dying_runner(job: EvalJob, config: SandboxConfig) -> EvalResult:
    os._exit(3)


def _job(name: str, **meta) -> EvalJob:
    return EvalJob(task_name=name, task_source="", candidate_source=f"# {name}", candidate_meta=meta)


def test_fan_out_and_collect_in_order(cluster) -> None:
    from agentforge.sandbox.ray_backend import RayBackend

    jobs = [_job(f"t{i}") for i in range(6)]
    seen: list[int] = []
    results = RayBackend(SandboxConfig(kind="ray"), runner=echo_runner).run_many(
        jobs, on_result=lambda i, r: seen.append(i))
    assert [r.task_name for r in results] == [j.task_name for j in jobs]
    assert all(r.status == Status.OK for r in results)
    assert sorted(seen) == list(range(6))
    assert len({r.provenance.host for r in results}) >= 1  # ran in worker processes
    assert all(r.provenance.host != str(os.getpid()) for r in results)


def test_identical_jobs_are_evaluated_once(cluster, tmp_path: Path) -> None:
    from agentforge.sandbox.ray_backend import RayBackend

    job = _job("same", marks=str(tmp_path))
    seen: list[int] = []
    results = RayBackend(SandboxConfig(kind="ray"), runner=dying_runner).run_many(
        [job, job], on_result=lambda i, r: seen.append(i))
    assert results[0] == results[1] and sorted(seen) == [0, 1]
    assert len((tmp_path / "same.attempts").read_text().split()) == 2  # one death, one success


def test_killed_worker_is_retried_and_counted_once(cluster, tmp_path: Path) -> None:
    from agentforge.sandbox.ray_backend import RayBackend

    jobs = [_job(f"k{i}", marks=str(tmp_path)) for i in range(3)]
    counted: dict[str, int] = {}

    def on_result(i: int, r: EvalResult) -> None:
        counted[r.task_name] = counted.get(r.task_name, 0) + 1

    results = RayBackend(SandboxConfig(kind="ray", extra={"ray_max_retries": 2}),
                         runner=dying_runner).run_many(jobs, workers=2, on_result=on_result)
    assert [r.status for r in results] == [Status.OK] * 3
    assert counted == {"k0": 1, "k1": 1, "k2": 1}
    for i in range(3):
        pids = (tmp_path / f"k{i}.attempts").read_text().split()
        assert len(pids) == 2 and pids[0] != pids[1]  # the retry ran in a fresh worker


def test_retries_exhausted_is_a_crash_result(cluster) -> None:
    from agentforge.sandbox.ray_backend import RayBackend

    (result,) = RayBackend(SandboxConfig(kind="ray", extra={"ray_max_retries": 1}),
                           runner=always_dying_runner).run_many([_job("doomed", note="x")])
    assert result.status == Status.CRASH and result.stage == Stage.SANDBOX
    assert "retries" in result.error.message and result.candidate_meta == {"note": "x"}


def test_resources_per_device() -> None:
    from agentforge.sandbox.ray_backend import RayBackend, _for_node

    backend = RayBackend(SandboxConfig(kind="ray", extra={"ray_cpus_per_job": 2}))
    gpu = EvalJob(task_name="t", task_source="", candidate_source="", backend="cuda", device="cuda:3")
    cpu = _job("c")
    assert backend._resources(gpu)["num_gpus"] == 1
    assert backend._resources(cpu) | {"max_retries": 0} == {
        "num_gpus": 0, "num_cpus": 2.0, "max_retries": 0, "retry_exceptions": False}
    assert _for_node(gpu).device == "cuda"


def test_real_sandbox_on_the_nodes(cluster) -> None:
    """The default runner: each Ray task runs the job through the node's process sandbox."""
    import shutil
    import tempfile

    from agentforge.evaluator.api import make_job
    from agentforge.evaluator.result import Measure
    from agentforge.sandbox import get_backend

    from agentforge.candidate import Candidate
    from agentforge.task import Task

    from .conftest import FALLBACK, RELU, WRONG

    cache = tempfile.mkdtemp(prefix="agentforge-ray-cache-")
    os.chmod(cache, 0o777)  # the child drops to nobody when the tests run as root
    try:
        task = Task("level1/1_ReLU", RELU)
        quick = Measure(baselines=("eager",), compile_modes=(), timing=False)
        jobs = [make_job(task, Candidate(src, backend="cpu"), device="cpu", measure=quick, cache_dir=cache)
                for src in (FALLBACK, WRONG)]
        backend = get_backend("ray", quiet(kind="ray", cache_dir=cache, timeout_s=240))
        results = backend.run_many(jobs)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert [r.status for r in results] == [Status.INTEGRITY_FLAG, Status.MISMATCH], [r.summary() for r in results]
    assert results[0].flags[0].rule == "torch_fallback"


def test_leaderboard_eval_on_ray(cluster, tiny_tasks: Path, kernels: Path, tmp_path: Path) -> None:
    """`leaderboard eval --ray` end to end: CLI, evaluator API, Ray tasks, node sandboxes, store."""
    import shutil
    import tempfile

    from typer.testing import CliRunner

    from agentforge.cli import app
    from agentforge.store import ResultsStore

    cache = tempfile.mkdtemp(prefix="agentforge-ray-cache-")
    os.chmod(cache, 0o777)
    url = f"sqlite:///{tmp_path / 'ray.db'}"
    env = {"AGENTFORGE_TASKS_ROOT": str(tiny_tasks), "AGENTFORGE_CACHE_DIR": cache}
    try:
        out = CliRunner().invoke(app, [
            "leaderboard", "eval", str(kernels), "--suite", "level1", "--name", "on-ray", "--ray", "local",
            "--track", "hardened", "--backend", "cpu", "--device", "cpu", "--no-compile-baseline",
            "--no-progress", "--results-url", url], env=env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert out.exit_code == 0, out.output
    assert "3 jobs, 0 already stored, 3 stored now" in out.output
    with ResultsStore(url) as store:
        rows = {(r.task, r.sample): r for r in store.evaluations(entry="on-ray")}
    assert rows[("level1/1_ReLU", 0)].result.correct
    assert rows[("level1/1_ReLU", 1)].status == "integrity_flag"
    assert rows[("level1/2_Scale", 0)].status == "mismatch"
