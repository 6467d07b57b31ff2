"""Where the child could not fork its worker, the judge starts one itself: the sandbox hands the
pipeline its launcher (`child._worker_for`), since the evaluator may not import the sandbox."""

from __future__ import annotations

from pathlib import Path

from agentforge.evaluator.api import make_job
from agentforge.evaluator.result import Measure, Status
from agentforge.sandbox import child
from agentforge.sandbox.config import DEFAULT_ENTRY
from agentforge.sandbox.request import ChildRequest, Limits

from agentforge.candidate import Candidate
from agentforge.task import TaskText
from tests.fixtures import relu


def test_without_a_forked_worker_the_job_is_judged_with_a_launched_one(tmp_path: Path) -> None:
    job = make_job(TaskText("relu", relu.task()), Candidate(relu.lean_candidate("fallback_relu"), "cpu"),
                   device="cpu", measure=Measure(timing=False), cache_dir=str(tmp_path / "cache"))
    request = ChildRequest(entry=DEFAULT_ENTRY, job=job, workdir=str(tmp_path),
                           limits=Limits(address_space_bytes=None, cpu_seconds=600, file_size_bytes=2**30,
                                         max_processes=None))
    result = child.evaluate(request, worker=None)
    assert result.status == Status.OK and result.correctness, result.summary()
    assert all(record.passed for record in result.correctness)
