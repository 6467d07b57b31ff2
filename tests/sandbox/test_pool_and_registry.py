"""run_many (order, parallelism, one job per GPU at a time), the backend registry, the config."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from agentforge.evaluator.result import EvalJob, EvalResult, Stage, Status
from agentforge.sandbox import (
    SandboxConfig,
    backend_names,
    from_settings,
    get_backend,
    register_backend,
    run_many,
)
from agentforge.sandbox.pool import assign_devices, run_pool
from sandbox_helpers import fake_config, make_job

from agentforge.settings import SandboxSettings


def test_run_many_keeps_input_order_and_runs_in_parallel(tmp_path: Path) -> None:
    jobs = [make_job(f"import time\ntime.sleep({0.9 - 0.2 * i})\nRESULT_NOTE = {i}") for i in range(4)]
    seen: list[int] = []
    start = time.monotonic()
    results = run_many(jobs, fake_config(tmp_path), workers=4, on_result=lambda i, r: seen.append(i))
    elapsed = time.monotonic() - start
    assert [r.candidate_meta["note"] for r in results] == ["0", "1", "2", "3"]
    assert sorted(seen) == [0, 1, 2, 3]
    assert elapsed < sum(0.9 - 0.2 * i for i in range(4)) + 1.5  # overlapped, not serial


def test_run_many_isolates_failures(tmp_path: Path) -> None:
    jobs = [make_job("RESULT_NOTE = 'fine'"), make_job("import os\nos.abort()"), make_job("RESULT_NOTE = 'also'")]
    results = run_many(jobs, fake_config(tmp_path), workers=2)
    assert [r.status for r in results] == [Status.OK, Status.CRASH, Status.OK]


def _fake_result(job: EvalJob) -> EvalResult:
    return EvalResult(task_name=job.task_name, candidate_hash="h", backend="cpu", status=Status.OK,
                      stage=Stage.DONE, candidate_meta={"device": job.device})


def test_never_two_jobs_on_one_gpu_at_once() -> None:
    lock = threading.Lock()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    overall = {"now": 0, "peak": 0}

    def fake_run(job: EvalJob) -> EvalResult:
        with lock:
            running[job.device] = running.get(job.device, 0) + 1
            peak[job.device] = max(peak.get(job.device, 0), running[job.device])
            overall["now"] += 1
            overall["peak"] = max(overall["peak"], overall["now"])
        time.sleep(0.05)
        with lock:
            running[job.device] -= 1
            overall["now"] -= 1
        return _fake_result(job)

    jobs = [make_job(str(i), device="cuda") for i in range(8)] + [make_job("cpu", device="cpu")] * 4
    results = run_pool(fake_run, jobs, SandboxConfig(gpus=("0", "1")), workers=6)
    assert [r.candidate_meta["device"] for r in results[:4]] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert peak["cuda:0"] == 1 and peak["cuda:1"] == 1
    assert peak["cpu"] > 1 and overall["peak"] > 2


def test_jobs_keep_their_own_devices_without_a_gpu_list() -> None:
    jobs = [make_job("a", device="cuda:3"), make_job("b", device="cpu")]
    assert [j.device for j in assign_devices(jobs, ())] == ["cuda:3", "cpu"]


def test_unknown_backend_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown sandbox backend 'podman'.*docker, process, ray"):
        get_backend("podman")


def test_registered_backend_is_served() -> None:
    class Echo:
        def __init__(self, config: SandboxConfig) -> None:
            self.config = config

        def run(self, job: EvalJob) -> EvalResult:
            return _fake_result(job)

        def run_many(self, jobs, workers=1, on_result=None):  # type: ignore[no-untyped-def]
            return [self.run(j) for j in jobs]

    register_backend("echo-test", Echo)
    assert "echo-test" in backend_names()
    assert get_backend("echo-test").run(make_job("x")).status == Status.OK


def test_config_from_settings_and_validation(tmp_path: Path) -> None:
    settings = SandboxSettings(kind="process", timeout_s=30, memory_gb=2, cpu_seconds=60, isolation="none")
    config = from_settings(settings, cache_dir=str(tmp_path / "c"))
    assert (config.timeout_s, config.memory_gb, config.cpu_seconds, config.isolation) == (30.0, 2.0, 60, "none")
    assert config.cache_dir == str(tmp_path / "c")
    with pytest.raises(ValueError, match="choose one of: auto, bwrap, unshare, none"):
        SandboxConfig(isolation="chroot")
    with pytest.raises(ValueError, match="choose one of: process, docker, ray"):
        SandboxConfig(kind="lambda")
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        SandboxConfig(timeout_s=0)


def test_isolation_that_cannot_run_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentforge.sandbox import SandboxUnavailable, isolation

    reasons = {"bwrap": "bwrap is not installed", "unshare": "unshare failed here", "none": None}
    monkeypatch.setattr(isolation, "probe", lambda mode: reasons[mode])
    with pytest.raises(SandboxUnavailable, match="'bwrap' is unavailable: bwrap is not installed"):
        get_backend("process", SandboxConfig(isolation="bwrap"))
    monkeypatch.setattr(isolation, "is_root", lambda: False)
    assert isolation.resolve_mode("auto") == "none"  # not as root: said in each verdict's isolation
    monkeypatch.setattr(isolation, "is_root", lambda: True)
    with pytest.raises(SandboxUnavailable, match="--isolation none"):
        isolation.resolve_mode("auto")


def test_unusable_workdir_root_is_a_sandbox_error_value(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = get_backend("process", fake_config(tmp_path, workdir_root=str(blocker / "sub"))).run(make_job("x"))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "SandboxError"
