"""A job on cuda:N runs in a child that sees only GPU N (CUDA_VISIBLE_DEVICES) and uses cuda:0,
so events, synchronize and the current stream are on the job's GPU (issue 15, finding 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentforge.evaluator.protocol.messages import Setup
from agentforge.evaluator.result import EvalJob, Status
from agentforge.sandbox import run, worker
from agentforge.sandbox.pool import assign_devices, child_device

from tests.fixtures.sandbox import quiet


@pytest.mark.parametrize(("device", "inherited", "expected"), [
    ("cuda:2", None, ("2", "cuda:0")),
    ("cuda", None, ("0", "cuda:0")),
    ("cuda:0", None, ("0", "cuda:0")),
    ("cuda:1", "4,6", ("6", "cuda:0")),
    ("cuda:1", "GPU-aaaa, GPU-bbbb", ("GPU-bbbb", "cuda:0")),
    ("cpu", "1", (None, "cpu")),
    ("auto", None, (None, "auto")),
])
def test_child_device(device: str, inherited: str | None, expected: tuple[str | None, str]) -> None:
    assert child_device(device, inherited) == expected


def test_a_gpu_the_inherited_list_lacks_is_an_error() -> None:
    with pytest.raises(ValueError, match="not among the 2 GPU"):
        child_device("cuda:2", "0,1")
    with pytest.raises(ValueError, match="not among the 0 GPU"):
        child_device("cuda:0", "")  # the parent hid every GPU: the child must not see one


def test_pool_spreads_jobs_then_each_child_maps_its_own() -> None:
    jobs = [EvalJob(task_name=f"t{i}", task_source="", candidate_source="", device="cuda") for i in range(3)]
    assigned = assign_devices(jobs, ["0", "1"])
    assert [child_device(j.device, "3,7") for j in assigned] == [("3", "cuda:0"), ("7", "cuda:0"), ("3", "cuda:0")]


def _run(tmp_path: Path, device: str) -> str:
    here = str(Path(__file__).resolve().parent)
    config = quiet(tmp_path, entry="device_entries:report_device", python_paths=(here,), timeout_s=120)
    result = run(EvalJob(task_name="device", task_source="", candidate_source="", device=device), config)
    assert result.status == Status.OK, result.error
    return result.candidate_meta["note"]


def test_the_real_child_sees_one_gpu_and_runs_on_cuda_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,9")
    assert _run(tmp_path, "cuda:1") == "cuda:0 visible=9"
    assert _run(tmp_path, "cpu") == "cpu visible=5,9"  # a CPU job is left alone


def test_the_worker_takes_the_judges_visible_gpu_before_cuda_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    worker._configure(Setup(workdir=os.getcwd(), cuda_visible_devices="2", torch_switches=False, device="cuda:0"))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"


def test_loopback_comes_up_in_a_fresh_network_namespace() -> None:
    """Under `unshare` isolation the child brings `lo` up (ncu needs it; issue 15, finding 3)."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rn", "true"]).returncode != 0:
        pytest.skip("cannot make a network namespace here")
    code = ("from agentforge.evaluator.hardware.ncu import loopback_works as w; "
            "from agentforge.sandbox.child import loopback_up as up; "
            "before = w(); print(before, up(), w())")
    out = subprocess.run(["unshare", "-rn", sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True", "True"], out.stderr[-2000:]
