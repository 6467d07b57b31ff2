"""The judge's clock: a worker that reports faster calls than it made is caught by time the judge
measured itself (`timing_disagreement`), and an honest one is not.

Real parts: a real worker process (spawned), the real wire, the real timing stage. The lying
candidate rewrites the worker's own clock, which only a candidate that owns its process can do;
it is driven here without the static rules (which would stop a candidate importing the evaluator
before timing), so that the clock alone has to catch it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from agentforge.evaluator.judge.remote import Clock
from agentforge.evaluator.judge.stage_correctness import build_remote
from agentforge.evaluator.judge.stage_timing import (
    TimingRequest,
    busy_threads,
    clock_disagreement,
    ended_threads_us,
    measure,
    null_disagreement,
    outside_disagreement,
    thread_oversubscription,
)
from agentforge.evaluator.result import TimingConfig
from agentforge.sandbox.worker import launch_worker

from agentforge.task import Task

from .worker_timing import TASK, time_in_worker

SLOW_RELU = '''
import time
import torch
from torch import nn
{lie}

class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(0.1)
        return torch.relu(x)
'''
LIE = '''
import agentforge.evaluator.worker.candidate_side as _side
_real = _side._perf_counter_ns
_side._perf_counter_ns = lambda: _real() // 1000   # every interval it measures looks 1000x shorter
'''
CONFIG = TimingConfig(warmup=1, min_reps=6, max_reps=6, flush_l2=False, recheck_fraction=0.0)


def timed(source: str, tmp_path: Path, config: TimingConfig = CONFIG) -> tuple[list[tuple[str, str]], float]:
    outcome = time_in_worker(source, tmp_path, config, "clock_test_candidate")
    return outcome.evidence, outcome.record.candidate.median_us


@pytest.mark.parametrize("lie", [False, True], ids=["honest", "lying"])
def test_the_judges_clock_catches_a_lying_worker(lie: bool, tmp_path: Path) -> None:
    """A thousandfold lie gains nothing: it is flagged, or (when a loaded machine's noise hides it from
    the flag) the verdict times the candidate by the judge's own clock, about the real 100 ms."""
    evidence, median_us = timed(SLOW_RELU.format(lie=LIE if lie else ""), tmp_path)
    rules = {rule for rule, _ in evidence}
    if lie:
        assert "timing_disagreement" in rules or median_us >= 50_000, (median_us, evidence)
    else:
        assert median_us >= 100_000
        assert "timing_disagreement" not in rules, evidence


# A call that really computes for about 3 ms of CPU on one thread, so that the CPU the worker spends
# is the call's work. The lie makes the worker's clock count the CPU its thread spends, divided by a
# small factor: a figure inside the wall clock's tenfold bound whatever the machine's load.
BUSY = '''
import time
import torch
from torch import nn
{extra}

class ModelNew(nn.Module):
    def forward(self, x):
        begin = time.thread_time()
        while time.thread_time() - begin < 0.003:
            pass
        return torch.relu(x)
'''
SMALL_LIE = '''
import agentforge.evaluator.worker.candidate_side as _side
_side._perf_counter_ns = lambda: time.thread_time_ns() // {factor}
'''
# A second thread that computes as long as the calls do (it waits for each call's signal): on a
# machine with one thread allowed, the worker now works on two.
HELPER_THREAD = '''
import threading
_go = threading.Semaphore(0)

def _spin():
    while True:
        _go.acquire()
        begin = time.thread_time()
        while time.thread_time() - begin < 0.003:
            pass

threading.Thread(target=_spin, daemon=True).start()
_forward = ModelNew.forward

def _forward_with_helper(self, x):
    _go.release()
    return _forward(self, x)

ModelNew.forward = _forward_with_helper
'''
BUSY_CONFIG = TimingConfig(warmup=2, min_reps=12, max_reps=12, flush_l2=False, recheck_fraction=0.0)


@pytest.mark.parametrize("factor", [1, 2, 3], ids=["honest", "2x", "3x"])
def test_the_cpu_clock_catches_a_small_lie(factor: int, tmp_path: Path) -> None:
    """The worker's CPU time, read by the judge from the kernel, catches a lie of 2x that the wall
    clock's tenfold bound lets through; an honest busy worker is not flagged."""
    extra = SMALL_LIE.format(factor=factor) if factor > 1 else ""
    evidence, _ = timed(BUSY.format(extra=extra), tmp_path, BUSY_CONFIG)
    found = [ev for rule, ev in evidence if rule == "timing_disagreement"]
    if factor == 1:
        assert not found, evidence
    else:
        assert found and "of CPU per call" in found[-1], evidence


def test_a_second_working_thread_is_oversubscription(tmp_path: Path) -> None:
    """A helper thread that works during every call, on a worker given one thread, is caught by the
    judge's per-thread CPU reading, whatever the worker reports."""
    source = BUSY.format(extra="") + HELPER_THREAD
    evidence, _ = timed(source, tmp_path, BUSY_CONFIG)
    found = [ev for rule, ev in evidence if rule == "thread_oversubscription"]
    assert found and "2 threads of the worker worked" in found[0], evidence


REPEAT_DETECTOR = '''
import hashlib
import torch
from torch import nn

SEEN = set()

class ModelNew(nn.Module):
    def forward(self, x):
        key = hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()
        if key in SEEN:
            raise RuntimeError("timed input contents came back: a cache keyed on them would hit")
        SEEN.add(key)
        return torch.relu(x)
'''


def test_timed_input_contents_never_repeat(tmp_path: Path) -> None:
    """More repetitions than the old 4-contents x 17-scales cycle (68): every one is new, so a result
    cache keyed on the contents never hits. The candidate raises on the first repeat it sees."""
    config = TimingConfig(warmup=1, min_reps=90, max_reps=90, flush_l2=False, recheck_fraction=0.0)
    task = Task("elementwise_relu", TASK.read_text())
    client = launch_worker()
    try:
        client.setup(workdir=os.getcwd(), cache_dir=str(tmp_path / "cache"), cpu_threads=1, device="cpu",
                     torch_switches=True)
        client.request("load", source=REPEAT_DETECTOR, backend="cpu", compile_only=False, arch="sm_90a",
                       device="cpu", interpret=False, module_name="repeat_test_candidate")
        reference, candidate = build_remote(task, client, "default", 1234, torch.device("cpu"))
        with torch.no_grad():
            outcome = measure(TimingRequest(task, "default", candidate, reference, torch.float64, torch.device("cpu"),
                                            config, (), (), (1e-5, 1e-5), seed=99))
    finally:
        client.close()
    assert outcome.record.candidate.n == 90


def _clock(call_wall: float, null_wall: float, call_cpu: float, null_cpu: float, n: int = 12) -> Clock:
    """A judge's clock as a timing loop leaves it: a null round trip before every second call, small
    alternating noise on every reading."""
    clock = Clock()
    for i in range(n):
        wobble = (-1) ** i * 3.0
        if i % 2 == 0:
            clock.null_wall_us.append(null_wall + wobble)
            clock.null_cpu_us.append(null_cpu + wobble)
        clock.wall_us.append(null_wall + call_wall - wobble)
        clock.cpu_us.append(null_cpu + call_cpu - wobble)
        clock.paired_null.append(len(clock.null_wall_us) - 1)
    return clock


@pytest.mark.parametrize(("claimed", "cpu", "flagged"), [
    (1000.0, 950.0, False),   # honest: the CPU a call spends is at most its duration on one thread
    (900.0, 1000.0, False),   # a tenth slower than its CPU: within the 1.5x bound
    (600.0, 1000.0, True),    # a 1.7x lie
    (100.0, 1000.0, True),    # a tenfold lie
])
def test_the_cpu_bound_on_one_thread(claimed: float, cpu: float, flagged: bool) -> None:
    check = clock_disagreement([claimed] * 12, _clock(claimed, 500.0, cpu, 300.0), threads=1)
    found = [ev for rule, ev in check.evidence if rule == "timing_disagreement" and "of CPU" in ev]
    assert bool(found) == flagged, check


def test_the_cpu_bound_scales_with_the_threads_allowed() -> None:
    """Four threads allowed: 3000 us of CPU in a 1000 us call is honest; on one thread it is not."""
    clock = _clock(1000.0, 500.0, 3000.0, 300.0)
    assert not clock_disagreement([1000.0] * 12, clock, threads=4).evidence
    assert clock_disagreement([1000.0] * 12, clock, threads=1).evidence


def test_no_cpu_bound_on_a_gpu() -> None:
    """threads=None (a CUDA worker: its work is not CPU time) leaves only the wall clock."""
    check = clock_disagreement([100.0] * 12, _clock(100.0, 500.0, 5000.0, 300.0), threads=None)
    assert not check.evidence and check.substitute_us is None


@pytest.mark.parametrize(("claimed", "judged", "outcome"), [
    (1000.0, 1100.0, "believed"),
    (500.0, 1000.0, "substituted"),     # a 2x lie on the wall clock: the judge's estimate is used
    (50.0, 1000.0, "flagged"),          # beyond the tenfold bound
])
def test_the_wall_clock_substitutes_or_flags(claimed: float, judged: float, outcome: str) -> None:
    check = clock_disagreement([claimed] * 12, _clock(judged, 500.0, claimed, 300.0), threads=None)
    if outcome == "flagged":
        assert [rule for rule, _ in check.evidence] == ["timing_disagreement"], check
    elif outcome == "substituted":
        assert not check.evidence and check.substitute_us is not None
        assert min(check.substitute_us) > 0.9 * judged, check.substitute_us
    else:
        assert not check.evidence and check.substitute_us is None, check


def test_busy_threads_and_the_allowance() -> None:
    before = {10: 1000.0, 11: 0.0, 12: 50.0, 13: 0.0}
    after = {10: 40_000.0, 11: 0.0, 12: 1_450.0, 13: 90.0, 14: 1_600.0}  # 14 started during the loop
    busy = busy_threads(before, after, main=10, calls_us=20 * 300.0)
    assert set(busy) == {10, 12, 14}
    assert thread_oversubscription(busy, threads=1) is not None
    assert thread_oversubscription(busy, threads=2) is None  # 2T - 1 = 3 working threads allowed
    assert thread_oversubscription({10: 40_000.0}, threads=1) is None


def test_threads_that_ended_during_the_loop_are_counted_from_the_process_clock() -> None:
    """A team started and joined inside every call is gone from /proc by the loop's end; its CPU is in
    the process clock, not in the live threads', and it counts as one more working thread."""
    before = {10: 1000.0, 11: 0.0}
    after = {10: 9000.0, 11: 0.0}
    assert ended_threads_us(8000.0 + 50.0, before, after) == pytest.approx(50.0)
    ended = ended_threads_us(8000.0 + 3000.0, before, after)
    assert ended == pytest.approx(3000.0)
    assert thread_oversubscription({10: 8000.0}, threads=1, ended_us=ended) is not None
    assert thread_oversubscription({10: 8000.0}, threads=1, ended_us=50.0) is None


def _outside(before_call: float, before_null: float, judge: float, n: int = 24,
             before_warm: float | None = None) -> Clock:
    """A judge's clock whose outside-the-window readings are these, with small alternating noise: a
    null before every second call (which then reuses its staged inputs: `before_warm`, a little less
    than a cold staging unless given)."""
    clock = _clock(100.0, 500.0, 100.0, 300.0, n)
    warm = before_call - 40.0 if before_warm is None else before_warm
    for i in range(n):
        fresh = i % 2 == 1  # the calls without a null beside them stage new inputs
        clock.outside_fresh.append(fresh)
        clock.outside_cpu_us.append((before_call if fresh else warm) + (-1) ** (i // 2) * 4.0)
    for i in range(len(clock.null_wall_us)):
        clock.null_outside_cpu_us.append(before_null + (-1) ** i * 4.0)
        clock.replica_cpu_us.append(judge + (-1) ** i * 2.0)
    return clock


@pytest.mark.parametrize(("before_call", "before_null", "judge", "before_warm", "flagged"), [
    (204.0, 199.0, 52.0, None, False),      # honest, small inputs: the protocol's ~120 us above the judge's cost
    (2560.0, 2554.0, 1820.0, None, False),  # honest, 32 MB of input: 1.4x the judge's cost
    (760.0, 190.0, 66.0, None, True),       # the work moved before each call on new inputs
    (190.0, 760.0, 66.0, None, True),       # ... or before each null round trip
    (760.0, 760.0, 66.0, None, True),       # ... or before every round trip alike, which the null would cancel
    (190.0, 200.0, 66.0, 700.0, True),      # ... or before the calls that reuse their null's staged inputs
])
def test_work_outside_the_timed_windows(before_call: float, before_null: float, judge: float,
                                        before_warm: float | None, flagged: bool) -> None:
    clock = _outside(before_call, before_null, judge, before_warm=before_warm)
    evidence, notes = outside_disagreement(clock, calls=24)
    assert bool(evidence) == flagged, (evidence, notes)
    assert all(rule == "timing_disagreement" for rule, _ in evidence)
    assert notes and "outside the timed windows" in notes[0]


def test_uneven_work_before_the_calls_on_reused_inputs_buys_no_slack_from_its_own_spread() -> None:
    """Work before the calls that reuse their null's inputs, landing unevenly, spreads those windows;
    the allowance comes from the windows every worker stages alike, not from the ones tested
    (`cases/work_in_null_window` passed this way, 3.2 ms against 0.7 ms, its own spread as noise)."""
    clock = _outside(700.0, 710.0, 300.0)
    warm = [i for i, fresh in enumerate(clock.outside_fresh) if not fresh]
    for k, i in enumerate(warm):  # the work lands at a different point of each window: 0.7 to 6.2 ms
        clock.outside_cpu_us[i] = 680.0 + 500.0 * k
    evidence, notes = outside_disagreement(clock, calls=24)
    assert evidence and "before each call on the inputs its null had just staged" in evidence[0][1], notes


def test_too_few_readings_outside_the_windows_flag_nothing() -> None:
    evidence, notes = outside_disagreement(_outside(5000.0, 100.0, 50.0, n=2), calls=2)
    assert not evidence and "too few" in notes[0]


def test_without_the_judges_own_cost_only_the_comparisons_hold() -> None:
    """Inputs too large for the judge to copy once more (`REPLICA_MAX_BYTES`): no bound from its own
    cost, so work before every round trip alike passes, and work before the calls alone is still caught."""
    alike, before_calls = _outside(760.0, 760.0, 66.0), _outside(760.0, 190.0, 66.0)
    for clock in (alike, before_calls):
        clock.replica_cpu_us.clear()
    evidence, notes = outside_disagreement(alike, calls=24)
    assert not evidence and "no clean side" in notes[0]
    assert outside_disagreement(before_calls, calls=24)[0]


def _with_control(clock: Clock, outside: float, null_cpu: float, null_wall: float) -> Clock:
    """The control worker's readings beside each null of `clock`, with small alternating noise."""
    for i in range(len(clock.null_wall_us)):
        clock.control_outside_cpu_us.append(outside + (-1) ** i * 3.0)
        clock.control_null_cpu_us.append(null_cpu + (-1) ** i * 3.0)
        clock.control_null_wall_us.append(null_wall + (-1) ** i * 3.0)
    return clock


@pytest.mark.parametrize(("worker", "judge", "control", "flagged"), [
    (632.7, 107.6, 690.0, False),   # the fresh-clone CI's honest worker under load (the judge's bound flagged it)
    (1050.0, 600.0, 1110.0, False),  # honest, the CLI's inputs on the quiet VM
    (2400.0, 100.0, 300.0, True),   # 2.3 ms moved before every round trip alike
    (2400.0, 1200.0, 400.0, True),  # ... which the judge's own cost, inflated by load, would have let through
])
def test_a_control_worker_bounds_the_outside_windows_by_what_they_cost_now(
        worker: float, judge: float, control: float, flagged: bool) -> None:
    clock = _with_control(_outside(worker, worker, judge), control, 300.0, 500.0)
    evidence, notes = outside_disagreement(clock, calls=24)
    assert bool(evidence) == flagged, (evidence, notes)
    assert "the control worker" in notes[0]
    if flagged:
        assert "control worker" in evidence[0][1]


def test_a_lost_control_leaves_the_judges_bound_and_says_so() -> None:
    clock = _with_control(_outside(760.0, 760.0, 66.0), 2000.0, 300.0, 500.0)
    del clock.control_outside_cpu_us[3:]
    clock.control_lost = "the worker exited during 'time'"
    evidence, notes = outside_disagreement(clock, calls=24)
    assert evidence and "the judge's own thread" in evidence[0][1]
    assert any("stopped answering" in n for n in notes)


@pytest.mark.parametrize(("cpu", "wall", "flagged"), [
    (300.0, 500.0, False),    # the worker's nulls cost what the control's do
    (290.0, 470.0, False),
    (900.0, 500.0, True),     # work inside the null's window, on its CPU clock
    (300.0, 1400.0, False),   # a slow wall alone is the scheduler's (preemption under load), not work
])
def test_a_null_dearer_than_the_controls_is_work_in_the_subtracted_window(cpu: float, wall: float,
                                                                         flagged: bool) -> None:
    clock = _outside(200.0, 200.0, 60.0)
    clock.null_cpu_us[:] = [cpu + (-1) ** i * 3.0 for i in range(len(clock.null_wall_us))]
    clock.null_wall_us[:] = [wall + (-1) ** i * 3.0 for i in range(len(clock.null_wall_us))]
    _with_control(clock, 200.0, 300.0, 500.0)
    evidence, notes = null_disagreement(clock)
    assert bool(evidence) == flagged, (evidence, notes)
    assert len(notes) == 1 and "CPU" in notes[0]


def test_uneven_work_in_the_nulls_buys_no_slack_from_its_own_spread() -> None:
    """Work in the nulls, unevenly (0.3 to 3.6 ms): the worker's own spread is what is tested, the
    control's bounds it."""
    clock = _outside(200.0, 200.0, 60.0)
    clock.null_cpu_us[:] = [300.0 + 300.0 * i for i in range(len(clock.null_wall_us))]
    _with_control(clock, 200.0, 300.0, 500.0)
    evidence, notes = null_disagreement(clock)
    assert evidence, notes


def test_without_a_control_the_nulls_are_not_compared() -> None:
    assert null_disagreement(_outside(200.0, 200.0, 60.0)) == ([], [])
