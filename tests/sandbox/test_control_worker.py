"""The control worker (`judge.control`): forked beside the candidate's before the request is read,
never given candidate code, and timed beside it, so that the bound on the candidate's harness costs
follows the machine's load."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from agentforge.evaluator.result import Measure
from agentforge.sandbox import child

from agentforge.candidate import Candidate
from agentforge.evaluation import evaluate, make_job
from agentforge.task import TaskText
from tests.fixtures import relu
from tests.fixtures.sandbox import quiet


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_child_forks_a_control_beside_the_worker_and_closing_the_worker_reaps_both() -> None:
    client = child._start_worker(interpret=False)
    assert client is not None and client.control is not None
    pids = (client.pid, client.control.pid)
    assert len(set(pids)) == 2 and all(_alive(pid) for pid in pids)
    client.close()
    assert client.control is None and not any(_alive(pid) for pid in pids)


def test_a_timed_cpu_verdict_holds_the_worker_to_the_control_beside_it(tmp_path: Path) -> None:
    """As a user's CPU verdict runs: through the sandbox, timed on one thread. The honest worker is
    accepted, and the notes say its outside windows and nulls were held to the control's."""
    candidate = Candidate(relu.lean_candidate("control_relu"), "cpu")
    # 256 Ki elements, so the kernel's own code is sampled in the timed windows even on a loaded
    # machine: at the default 4,096 it drew 3 of 600 timed samples here quietly, and 0 in a loaded CI.
    job = make_job(TaskText("relu", relu.task(n=1 << 18)), candidate, device="cpu",
                   measure=Measure(baselines=("eager",)))
    job = dataclasses.replace(job, cpu_threads=1)
    result = evaluate(job, quiet(tmp_path))
    assert result.accepted, result.summary()
    notes = "\n".join(result.timing.notes)
    assert "the same staging and flush cost the control worker" in notes, notes
    assert "null round trips (CPU, trimmed means)" in notes, notes
    # The kernel was built by the judge (in the control), and the sampler told it by its content.
    separation = result.provenance.track_settings["separation"]
    builds = separation["judge_built"]["builds"]
    assert [(b["kind"], b["name"], b["ok"]) for b in builds] == [("lean-cpp", "control_relu", True)], separation
    assert len(builds[0]["sha256"]) == 16 and separation["judge_builds"].startswith("by the judge, stored in")
    sampling = result.provenance.track_settings["native_sampling"]
    assert sampling["own_by"] == "judge_builds" and sampling["coverage"]["own_timed"] > 0, sampling


REACH_FOR_THE_CONTROL = """
import os
import torch
from torch import nn

def _reach():
    opened = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/mem", "r+b"):
                    opened.append(name)
            except OSError:
                pass
    return opened

OPENED = _reach()

class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError(f"opened for writing: {OPENED}")
"""


def test_the_candidates_worker_cannot_open_the_controls_memory(tmp_path: Path) -> None:
    """The control runs as the candidate's uid. Were it dumpable (as the candidate's worker is, for
    the judge's sampler), the candidate could open its /proc/PID/mem and slow it, loosening the bound
    it sets: it was, until the control was set up not sampled (`Setup.sampled`)."""
    job = make_job(TaskText("relu", relu.task()), Candidate(REACH_FOR_THE_CONTROL, "cpu"), device="cpu",
                   measure=Measure(baselines=("eager",)))
    result = evaluate(dataclasses.replace(job, cpu_threads=1), quiet(tmp_path))
    assert result.error is not None and "opened for writing: []" in result.error.message, result.summary()
