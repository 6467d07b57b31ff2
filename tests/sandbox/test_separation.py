"""The judge and its candidate worker, kept apart by the operating system, in real sandboxed
evaluations (the process backend, the real pipeline): the worker's own view of the judge from
inside, what the verdict's provenance says, and an honest OpenMP candidate on two threads timed
under the seal."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from agentforge.evaluator.result import Measure, Status, TimingConfig
from agentforge.sandbox import SandboxConfig, isolation

from agentforge.candidate import Candidate
from agentforge.evaluation import evaluate, make_job
from agentforge.task import Task
from tests.fixtures.sandbox import quiet

EXPLOITS = Path(__file__).resolve().parents[1] / "exploits"
RELU = Task("elementwise_relu", (EXPLOITS / "tasks" / "elementwise_relu.py").read_text())

# The worker looks for the judge from inside and reports what it saw in the exception it raises.
PROBE = r'''
import json
import os

import torch
from torch import nn


def _try(action):
    try:
        return action()
    except OSError as exc:
        return f"error {exc.errno}"


def _view():
    judge = os.getppid()
    with open(f"/proc/{judge}/status") as f:
        judge_uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
    for cache in ("/tmp/torchinductor_nobody", "/tmp/torchinductor_root"):
        with open(cache, "w") as f:  # a file where a directory of the judge's cache would go
            f.write("planted")
    return {"uid": os.getuid(), "judge_uid": judge_uid, "tmp": sorted(os.listdir("/tmp")),
            "shm": sorted(os.listdir("/dev/shm")),
            "judge_environ": _try(lambda: len(open(f"/proc/{judge}/environ").read())),
            "judge_tmp": _try(lambda: os.listdir(f"/proc/{judge}/root/tmp")),
            "judge_cwd": _try(lambda: os.listdir(f"/proc/{judge}/cwd"))}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("VIEW " + json.dumps(_view()))

    def forward(self, x):
        return torch.relu(x)
'''


def _config(tmp_path: Path) -> SandboxConfig:
    return quiet(tmp_path, timeout_s=240)


needs_root_isolation = pytest.mark.skipif(
    not isolation.is_root() or all(isolation.probe(m) for m in isolation.ISOLATING_MODES),
    reason="the judge gets a uid of its own when the sandbox starts as root, with bwrap or unshare")


@needs_root_isolation
def test_the_worker_sees_nothing_of_the_judge(tmp_path: Path) -> None:
    job = make_job(RELU, Candidate(PROBE, backend="cpu"), device="cpu", measure=Measure(timing=False))
    result = evaluate(job, _config(tmp_path))
    assert result.status == Status.RUNTIME_ERROR and result.error is not None, result.summary()
    view = json.loads(result.error.message.split("VIEW ", 1)[1])
    assert view["uid"] == 65534 and view["judge_uid"] == isolation.JUDGE_UID
    assert view["judge_environ"] == "error 13" and view["judge_tmp"] == "error 13" and view["judge_cwd"] == "error 13"
    assert not [name for name in view["tmp"] if name.startswith("agentforge-judge-")]
    assert "torchinductor_nobody" in view["tmp"]  # planted in its own /tmp, which the judge never reads
    separation = result.provenance.track_settings["separation"]
    assert separation["judge_uid"] == isolation.JUDGE_UID and separation["worker_uid"] == 65534
    assert separation["private_tmp"] == "yes" and separation["judge_tmpdir"] == "private"
    assert separation["seccomp"] == "installed" and separation["guard_seen"] is True
    assert separation["not_protected"] == []


OPENMP_RELU = (EXPLOITS / "honest" / "relu_omp_guarded_cpp.py").read_text()


@needs_root_isolation
def test_an_honest_openmp_candidate_on_two_threads_is_timed_sealed(tmp_path: Path) -> None:
    job = make_job(RELU, Candidate(OPENMP_RELU, backend="cpu"), device="cpu",
                   measure=Measure(timing=True, baselines=("eager",)),
                   timing=TimingConfig(warmup=3, min_reps=10, max_reps=20, time_cap_s=1.0))
    result = evaluate(dataclasses.replace(job, cpu_threads=2), _config(tmp_path))
    # Timed to the end under the seal, with its team of two: nothing the filters refused. (Whether the
    # judge's native sampler reads a two-thread team's spin in torch's libgomp as torch is its own
    # question: at load 8 it once did.)
    assert result.timing is not None and result.correctness, result.summary()
    assert all(r.passed for r in result.correctness), result.summary()
    assert not {f.rule for f in result.flags} & {"refused_syscall", "worker_unsealed", "thread_oversubscription"}
    separation = result.provenance.track_settings["separation"]
    assert separation["sealed"] == "installed" and separation["not_protected"] == []


# The worker, as a candidate that read the /proc change (its own files writable under unshare, as
# under bwrap), tries the judge's /proc files and the kernel's. Each write puts back what it read,
# so a write that went through would change nothing on the host; none may go through.
PROC_WRITES = r'''
import json
import os

import torch
from torch import nn


def _write(path, data=None):
    try:
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        with open(path, "wb", buffering=0) as f:
            f.write(data)
        return "written"
    except OSError as exc:
        return f"error {exc.errno}"


def _attempts():
    judge = os.getppid()
    tried = {name: _write(f"/proc/{judge}/{name}", b"0" if name == "mem" else None)
             for name in ("mem", "oom_score_adj", "comm", "timerslack_ns", "coredump_filter", "clear_refs")}
    for path in ("/proc/sys/vm/swappiness", "/proc/sys/kernel/hostname", "/proc/irq/default_smp_affinity"):
        tried[path] = _write(path)
    tried["/proc/sysrq-trigger"] = _write("/proc/sysrq-trigger", b"h")
    tried["own comm"] = _write("/proc/self/comm", b"worker")
    return tried


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("TRIED " + json.dumps(_attempts()))

    def forward(self, x):
        return torch.relu(x)
'''


@needs_root_isolation
@pytest.mark.parametrize("mode", [m for m in isolation.ISOLATING_MODES if not isolation.probe(m)])
def test_the_worker_writes_none_of_the_judges_or_the_kernels_proc_files(tmp_path: Path, mode: str) -> None:
    job = make_job(RELU, Candidate(PROC_WRITES, backend="cpu"), device="cpu", measure=Measure(timing=False))
    result = evaluate(job, dataclasses.replace(_config(tmp_path), isolation=mode))
    assert result.status == Status.RUNTIME_ERROR and result.error is not None, result.summary()
    tried = json.loads(result.error.message.split("TRIED ", 1)[1])
    assert tried.pop("own comm") == "written"  # its own files are its own, as a driver needs
    assert [name for name, outcome in tried.items() if outcome == "written"] == [], tried
