"""Spare children: started before their job (so a CPU job does not wait for Python and torch), each
still a fresh, isolated child of its own that serves one job; a dead spare costs nothing but the
fallback to a cold start, and none outlives the process that made it."""

from __future__ import annotations

import ast
import os
import threading
import time
from pathlib import Path

import pytest
from agentforge.evaluator.result import Status
from agentforge.sandbox import spares
from agentforge.sandbox.process_backend import ProcessBackend
from sandbox_helpers import MODES, fake_config, make_job

# The child's start time, in clock ticks since boot (field 22 of /proc/self/stat), and its workdir.
STARTED = "import os\nRESULT_NOTE = [int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]), os.getcwd()]"


def ticks_now() -> int:
    with open("/proc/uptime") as fh:
        return int(float(fh.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


@pytest.fixture(autouse=True)
def no_spares_left():
    yield
    spares.discard_all()


def note(result) -> object:
    """What the candidate left in RESULT_NOTE (the fake entry returns it as its repr)."""
    assert result.status == Status.OK, result.error
    return ast.literal_eval(result.candidate_meta["note"])


@pytest.mark.parametrize("mode", MODES)
def test_a_job_after_the_first_runs_in_a_child_started_before_it(tmp_path: Path, mode: str) -> None:
    backend = ProcessBackend(fake_config(tmp_path, isolation=mode, warm_spares=1))
    first_start, first_dir = note(backend.run(make_job(STARTED)))
    spares.settle()
    time.sleep(1.0)
    submitted = ticks_now()
    second_start, second_dir = note(backend.run(make_job(STARTED)))
    assert second_start < submitted, "the second job's child was started at the job, not before it"
    assert first_start < second_start and first_dir != second_dir  # a child and a folder per job
    spares.settle()
    assert spares.count(backend._spare_key()) == 1  # the next one is ready


def test_a_spare_serves_one_job_and_sees_nothing_of_the_one_before(tmp_path: Path) -> None:
    backend = ProcessBackend(fake_config(tmp_path, warm_spares=1))
    leave = "import builtins\nopen('left.txt', 'w').write('x')\nbuiltins.LEFT_MARK = 1\nRESULT_NOTE = 0"
    look = "import builtins, os\nRESULT_NOTE = [os.path.exists('left.txt'), hasattr(builtins, 'LEFT_MARK')]"
    assert note(backend.run(make_job(leave))) == 0
    for _ in range(2):  # the spare made after the first job, then the one made after the second
        assert note(backend.run(make_job(look))) == [False, False]


def test_a_spare_that_died_while_waiting_falls_back_to_a_cold_start(tmp_path: Path) -> None:
    backend = ProcessBackend(fake_config(tmp_path, warm_spares=1))
    note(backend.run(make_job(STARTED)))
    spares.settle()
    spare = spares.take(backend._spare_key())
    assert spare is not None
    os.killpg(spare.proc.pid, 9)
    spare.proc.wait()
    spares.put(backend._spare_key(), spare)  # back in the pool, dead
    submitted = ticks_now()
    started, _ = note(backend.run(make_job(STARTED)))
    assert started >= submitted  # a child started for this job
    assert not spare.job_dir.exists()  # the dead spare's folder was removed


def test_cuda_and_interpreter_jobs_never_take_a_spare(tmp_path: Path) -> None:
    backend = ProcessBackend(fake_config(tmp_path, warm_spares=1))
    job = make_job(STARTED)
    assert backend._warm(job)
    assert not backend._warm(make_job(STARTED, device="cuda:0"))
    from dataclasses import replace

    assert not backend._warm(replace(job, backend="triton"))
    assert not ProcessBackend(fake_config(tmp_path))._warm(job)  # off by default


def test_no_spare_outlives_its_process(tmp_path: Path) -> None:
    backend = ProcessBackend(fake_config(tmp_path, warm_spares=2))
    note(backend.run(make_job(STARTED)))
    backend.start_spare()
    spares.settle()
    waiting = [spares.take(backend._spare_key()) for _ in range(2)]
    assert all(s is not None and s.alive() for s in waiting)
    for spare in waiting:
        spares.put(backend._spare_key(), spare)
    spares.discard_all()
    for spare in waiting:
        assert spare.proc.poll() is not None and not spare.job_dir.exists()
    assert not [p for p in (tmp_path / "work").iterdir() if p.name.startswith("job-")]


@pytest.mark.parametrize("mode", MODES)
def test_a_spare_outlives_the_thread_whose_job_started_it(tmp_path: Path, mode: str) -> None:
    """A parent-death signal fires when the thread that started a child ends; a pool's worker thread
    ends long before the next job comes, and must not take the spare with it."""
    backend = ProcessBackend(fake_config(tmp_path, isolation=mode, warm_spares=1))
    worker = threading.Thread(target=lambda: note(backend.run(make_job(STARTED))))
    worker.start()
    worker.join()
    spares.settle()
    time.sleep(1.0)  # a signal sent at the thread's end has arrived by now
    spare = spares.take(backend._spare_key())
    assert spare is not None and spare.alive()
    spares.put(backend._spare_key(), spare)
    submitted = ticks_now()
    assert note(backend.run(make_job(STARTED)))[0] < submitted


def test_a_new_config_ends_the_spares_of_the_old_one(tmp_path: Path) -> None:
    """A process that moves to a new config (a new run, the next test) keeps no idle interpreters
    for the old one: each holds torch, about 0.4 GB."""
    old = ProcessBackend(fake_config(tmp_path / "a", warm_spares=1))
    note(old.run(make_job(STARTED)))
    spares.settle()
    first = spares.take(old._spare_key())
    assert first is not None
    spares.put(old._spare_key(), first)
    new = ProcessBackend(fake_config(tmp_path / "b", warm_spares=1))
    note(new.run(make_job(STARTED)))
    spares.settle()
    assert first.proc.poll() is not None and not first.job_dir.exists()
    assert spares.count(old._spare_key()) == 0 and spares.count(new._spare_key()) == 1


INDUCTOR_SEEN = "import sys\nRESULT_NOTE = 'torch._inductor.compile_fx' in sys.modules"


def _blocked_reading(pgid: int) -> bool:
    """Whether the sandbox child in process group `pgid` is blocked in read(2) (syscall 0 on x86-64,
    63 on arm64) on its request pipe: it waits for its request, whatever it imports first done. (A
    read of a module's file during an import is a read too, on another descriptor.)"""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            if int(stat[2]) != pgid or argv[1:4] != [b"-P", b"-m", b"agentforge.sandbox.child"]:
                continue  # (the reaper before it names the child in its own argv)
            request_fd = int(argv[argv.index(b"--request-fd") + 1])
            call = Path(f"/proc/{entry.name}/syscall").read_text().split()
            return call[0] in ("0", "63") and int(call[1], 16) == request_fd
        except (OSError, IndexError, ValueError):
            continue
    return False


def _idle_spare(backend: ProcessBackend) -> object:
    spares.settle()
    spare = spares.take(backend._spare_key())
    assert spare is not None
    deadline = time.monotonic() + 120
    while not _blocked_reading(spare.proc.pid):
        assert time.monotonic() < deadline, "the spare never came to wait for its request"
        time.sleep(0.2)
    spares.put(backend._spare_key(), spare)
    return spare


def test_a_spare_imports_inductor_only_after_a_job_that_compiled(tmp_path: Path) -> None:
    """Inductor's import (1.6 s of CPU) is paid by a spare only when the last job timed a
    torch.compile baseline: a run of eager-only jobs (an RL step, a lean suite) would otherwise pay
    it in every spare, beside its jobs."""
    from dataclasses import replace

    from agentforge.evaluator.result import Measure

    backend = ProcessBackend(fake_config(tmp_path, isolation="none", warm_spares=1, torch_switches=True))
    eager_only = replace(make_job(INDUCTOR_SEEN), measure=Measure(baselines=("eager",)))
    compiling = make_job(INDUCTOR_SEEN)  # the default measure times torch.compile too

    assert note(backend.run(eager_only)) is False  # a child started at the job
    spare = _idle_spare(backend)
    assert "--warm-compile" not in spare.proc.args
    assert note(backend.run(compiling)) is False  # that spare, idle before it, imported no Inductor

    spare = _idle_spare(backend)
    assert "--preload" in spare.proc.args and "--warm-compile" in spare.proc.args
    assert note(backend.run(eager_only)) is True  # the spare after a compiling job had imported it
