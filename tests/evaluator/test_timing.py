"""Timing statistics, the interleaved order, the stopping rule and the re-checks, with fake subjects."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
import torch
from agentforge.evaluator import timing
from agentforge.evaluator.result import TimingConfig

CPU = torch.device("cpu")


def test_stats_median_spread_and_stderr() -> None:
    samples = [10.0, 12.0, 11.0, 13.0, 100.0]
    s = timing.stats(samples)
    assert s.median_us == 12.0 and s.min_us == 10.0 and s.max_us == 100.0 and s.n == 5
    assert s.mean_us == pytest.approx(29.2)
    assert s.stdev_us == pytest.approx(statistics.stdev(samples))
    assert s.rel_stderr == pytest.approx(statistics.stdev(samples) / math.sqrt(5) / 29.2)
    assert s.samples_us == tuple(samples)


def test_stats_of_one_sample_has_infinite_stderr() -> None:
    s = timing.stats([5.0])
    assert s.stdev_us == 0.0 and math.isinf(s.rel_stderr)


def test_summarise_mean_puts_the_mean_in_median_us() -> None:
    subject = timing.Subject("x", lambda: None, samples_us=[1.0, 2.0, 6.0])
    assert timing.summarise(subject, "median").median_us == 2.0
    assert timing.summarise(subject, "mean").median_us == pytest.approx(3.0)


class Recorder:
    """Fake subjects that log the order they are called in."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def subject(self, name: str) -> timing.Subject:
        def fn(*args: Any) -> torch.Tensor:
            self.log.append(name)
            return torch.zeros(1)

        return timing.Subject(name, fn)


def run(subjects: list[timing.Subject], config: TimingConfig, **kwargs: Any) -> timing.TimingRun:
    return timing.run_interleaved(subjects, [torch.zeros(1)], lambda rep: None, CPU, config,
                                  kwargs.pop("recheck", None), seed=kwargs.pop("seed", 0), **kwargs)


def test_every_repetition_calls_every_subject_once_in_a_shuffled_order() -> None:
    rec = Recorder()
    names = ["candidate", "eager", "compile-default"]
    config = TimingConfig(warmup=2, min_reps=30, max_reps=30, target_rel_stderr=0.0, flush_l2=False)
    result = run([rec.subject(n) for n in names], config, seed=3)
    warm, timed = rec.log[:6], rec.log[6:]
    assert warm == ["candidate"] * 2 + ["eager"] * 2 + ["compile-default"] * 2  # warm-up, excluded
    reps = [timed[i:i + 3] for i in range(0, len(timed), 3)]
    assert len(reps) == 30 and all(sorted(r) == sorted(names) for r in reps)
    assert len({tuple(r) for r in reps}) > 1  # not a fixed order
    assert {r[0] for r in reps} == set(names)  # each subject goes first sometimes
    assert all(len(s.samples_us) == 30 for s in result.subjects.values())
    assert result.method == "host-monotonic" and not result.l2_flushed


def test_the_order_depends_on_the_seed_only() -> None:
    def order(seed: int) -> list[str]:
        rec = Recorder()
        config = TimingConfig(warmup=0, min_reps=8, max_reps=8, target_rel_stderr=0.0, flush_l2=False)
        run([rec.subject("candidate"), rec.subject("eager")], config, seed=seed)
        return rec.log

    assert order(1) == order(1)
    assert order(1) != order(2) or order(1) != order(3)


def test_stops_at_min_reps_once_the_stderr_is_small() -> None:
    rec = Recorder()
    config = TimingConfig(warmup=0, min_reps=5, max_reps=200, target_rel_stderr=10.0, flush_l2=False)
    result = run([rec.subject("candidate"), rec.subject("eager")], config)
    assert len(result.subjects["candidate"].samples_us) == 5


def test_stops_at_max_reps_when_the_target_is_never_met() -> None:
    rec = Recorder()
    config = TimingConfig(warmup=0, min_reps=3, max_reps=12, target_rel_stderr=0.0, time_cap_s=60, flush_l2=False)
    result = run([rec.subject("candidate")], config)
    assert len(result.subjects["candidate"].samples_us) == 12


def test_stops_at_the_time_cap() -> None:
    import time

    def slow(*args: Any) -> torch.Tensor:
        time.sleep(0.01)
        return torch.zeros(1)

    config = TimingConfig(warmup=0, min_reps=2, max_reps=10_000, target_rel_stderr=0.0, time_cap_s=0.05,
                          flush_l2=False)
    result = run([timing.Subject("candidate", slow)], config)
    assert 2 <= len(result.subjects["candidate"].samples_us) < 50


def test_fresh_inputs_every_repetition() -> None:
    refills: list[int] = []
    config = TimingConfig(warmup=0, min_reps=4, max_reps=4, target_rel_stderr=0.0, flush_l2=False)
    timing.run_interleaved([timing.Subject("candidate", lambda *a: None)], [torch.zeros(1)], refills.append, CPU,
                           config, None)
    assert refills == [0, 1, 2, 3]


def test_recheck_covers_the_first_repetition_and_a_random_share() -> None:
    checked: list[int] = []

    def recheck(rep: int, out: Any) -> str | None:
        checked.append(rep)
        return "wrong" if rep == 0 else None

    config = TimingConfig(warmup=0, min_reps=200, max_reps=200, target_rel_stderr=0.0, flush_l2=False,
                          recheck_fraction=0.25)
    result = run([timing.Subject("candidate", lambda *a: torch.zeros(1))], config, recheck=recheck)
    assert checked[0] == 0 and result.rechecks == len(checked)
    assert 20 < len(checked) < 90  # about a quarter of 200
    assert any(rep % 10 for rep in checked)  # not the old fixed every-10th schedule
    assert result.recheck_failures == ["wrong"]


def test_no_recheck_at_fraction_zero() -> None:
    config = TimingConfig(warmup=0, min_reps=5, max_reps=5, target_rel_stderr=0.0, flush_l2=False,
                          recheck_fraction=0.0)
    result = run([timing.Subject("candidate", lambda *a: torch.zeros(1))], config,
                 recheck=lambda rep, out: "never called")
    assert result.rechecks == 0 and not result.recheck_failures


def test_crosscheck_with_eager_runs_every_repetition() -> None:
    seen: list[tuple[int, float, float]] = []

    def crosscheck(rep: int, cand: torch.Tensor, eager: torch.Tensor) -> str | None:
        seen.append((rep, float(cand), float(eager)))
        return f"rep {rep}" if rep == 3 else None

    config = TimingConfig(warmup=0, min_reps=6, max_reps=6, target_rel_stderr=0.0, flush_l2=False)
    subjects = [timing.Subject("candidate", lambda *a: torch.ones(1)),
                timing.Subject("eager", lambda *a: torch.zeros(1)),
                timing.Subject("compile-default", lambda *a: torch.full((1,), 2.0))]
    result = run(subjects, config, crosscheck=crosscheck)
    assert seen == [(rep, 1.0, 0.0) for rep in range(6)]
    assert result.recheck_failures == ["rep 3"]


def test_the_cpu_flush_writes_twice_the_cores_private_caches() -> None:
    """L1d + L2, not the shared last level (warm, as for a layer whose input the one before made)."""
    flusher = timing.CacheFlusher(CPU, enabled=True)
    assert timing.private_cache_bytes() >= 32 << 10
    assert flusher.buffer is not None and flusher.buffer.numel() * 4 == 2 * timing.private_cache_bytes()
    assert timing.CacheFlusher(CPU, enabled=False).buffer is None
    flusher.buffer.fill_(7)
    flusher()  # the CPU flush still writes the whole buffer
    assert int(flusher.buffer.count_nonzero()) == 0 and flusher.sink is None


def test_read_sweep_reads_every_element() -> None:
    buffer, sink = torch.arange(1000, dtype=torch.int32), torch.zeros((), dtype=torch.int32)
    timing.read_sweep(buffer, sink)
    assert int(sink) == sum(range(1000))


def _ops_of_sweep(sink_dtype: torch.dtype) -> set[str]:
    buffer, sink = torch.zeros(1 << 16, dtype=torch.int32), torch.zeros((), dtype=sink_dtype)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        timing.read_sweep(buffer, sink)
    return {event.name for event in prof.events()}


def test_the_flush_reads_its_buffer_without_a_widened_copy() -> None:
    """The flush's read pass must read the buffer once, not copy it to a wider type first (a sum
    into an int64 sink does: on an H100, 200 MB more traffic and a 200 MB temporary per flush)."""
    assert timing.CacheFlusher(torch.device("cpu"), True).sink is None  # the CPU flush only writes
    assert "aten::_to_copy" in _ops_of_sweep(torch.int64)  # what the old sink cost
    assert "aten::_to_copy" not in _ops_of_sweep(torch.int32)


@pytest.mark.gpu
def test_cuda_flush_leaves_nothing_in_flight_and_head_start_hides_launch_overhead() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    device = torch.device("cuda", 0)
    flusher = timing.CacheFlusher(device, enabled=True)
    assert flusher.sink is not None and flusher.sink.dtype == flusher.buffer.dtype  # no widened copy
    flusher()
    assert torch.cuda.current_stream().query()  # the flush finished before the timed call starts
    events = timing.timing_events()
    assert events is timing.timing_events() and all(e.query() for e in events)  # made once, already recorded
    x = torch.ones(1024, device=device)

    def median(head: bool) -> float:
        samples = sorted(timing._time_call_cuda(lambda t: t.add_(1), [x], head)[0] for _ in range(50))
        return samples[len(samples) // 2]

    # a one-block kernel: a few microseconds on the device, whatever Python's launch costs
    assert median(True) < 15.0
    assert median(True) <= median(False) + 1.0


def test_unsynchronized_evidence_needs_a_gap_well_beyond_the_baselines() -> None:
    honest = timing.Subject("eager", None, samples_us=[10.0] * 5, closed_us=[15.0] * 5)
    fine = timing.Subject("candidate", None, samples_us=[10.0] * 5, closed_us=[16.0] * 5)
    side = timing.Subject("candidate", None, samples_us=[2.0] * 5, closed_us=[200.0] * 5)
    assert timing.unsynchronized_evidence(fine, [honest]) is None
    evidence = timing.unsynchronized_evidence(side, [honest])
    assert evidence is not None and "outside the timed stream" in evidence
