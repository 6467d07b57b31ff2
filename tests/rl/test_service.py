"""The reward service: cache hits, per-request timeouts, concurrency, persistence, failures."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from agentforge.evaluator.result import EvalJob, Status
from agentforge.rl.rewards import RewardConfig, build_rewarder
from agentforge.rl.service import RewardRequest, RewardService, ServiceConfig


def reply(tag: str) -> str:
    return f"```python\n# {tag}\nclass ModelNew:\n    pass\n```"


def request(tag: str, **meta) -> RewardRequest:
    return RewardRequest(task_name="level1/relu", task_source="# task", completion=reply(tag), meta=meta)


def fake_job(req: RewardRequest, code: str) -> EvalJob:
    return EvalJob(task_name=req.task_name, task_source=req.task_source, candidate_source=code)


class FakeEvaluator:
    """Answers by the tag in the candidate: 'fast' 2x, 'slow' 1x, 'hang' never, 'boom' raises."""

    def __init__(self, make_result, delay_s: float = 0.0):
        self.make_result = make_result
        self.delay_s = delay_s
        self.calls: list[str] = []
        self.running = 0
        self.max_running = 0
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, job: EvalJob):
        with self._lock:
            self.calls.append(job.candidate_source)
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            if "hang" in job.candidate_source:
                self.release.wait(30)
            if "boom" in job.candidate_source:
                raise ConnectionError("worker lost")
            time.sleep(self.delay_s)
            return self.make_result(candidate_us=50.0 if "fast" in job.candidate_source else 100.0)
        finally:
            with self._lock:
                self.running -= 1


def service(evaluator, **config) -> RewardService:
    return RewardService(build_rewarder(RewardConfig(shaper="log_speedup")), ServiceConfig(**config),
                         evaluate_fn=evaluator, job_factory=fake_job)


def test_scores_in_order_and_serves_repeats_from_the_cache(make_result):
    evaluator = FakeEvaluator(make_result)
    svc = service(evaluator)
    records = svc.score_sync([request("fast", i=0), request("slow", i=1), request("fast", i=2)])
    assert [r.meta["i"] for r in records] == [0, 1, 2]
    assert records[0].reward == pytest.approx(0.6931, abs=1e-3) and records[1].reward == 0.0
    assert len(evaluator.calls) == 2  # the second "fast" shared the first one's evaluation
    again = svc.score_sync([request("fast")])[0]
    assert again.cached and again.reward == records[0].reward
    assert len(evaluator.calls) == 2
    assert svc.stats.cache_hits == 2 and svc.stats.evaluations == 2


def test_no_code_is_never_evaluated(make_result):
    evaluator = FakeEvaluator(make_result)
    record = service(evaluator).score_sync([RewardRequest("t", "# task", "I would use shared memory.")])[0]
    assert record.status == "no_code" and record.reward == -1.0
    assert evaluator.calls == []


def test_a_hung_candidate_times_out_without_blocking_the_others(make_result):
    evaluator = FakeEvaluator(make_result, delay_s=0.05)
    # One slot: the hung evaluation must hand it on when its request times out.
    svc = service(evaluator, concurrency=1, request_timeout_s=0.5)
    started = time.monotonic()
    records = svc.score_sync([request("hang"), request("fast"), request("slow")])
    elapsed = time.monotonic() - started
    evaluator.release.set()
    assert records[0].status == Status.TIMEOUT.value and records[0].reward == -1.0
    assert records[1].accepted and records[2].accepted
    assert elapsed < 3.0
    assert svc.stats.timeouts == 1


def test_timeouts_are_not_cached(make_result):
    evaluator = FakeEvaluator(make_result)
    svc = service(evaluator, request_timeout_s=0.2)
    assert svc.score_sync([request("hang")])[0].status == "timeout"
    evaluator.release.set()
    time.sleep(0.1)
    # The abandoned evaluation finished later and its real verdict is cached.
    assert svc.score_sync([request("hang")])[0].status == "ok"


def test_concurrency_is_used_and_bounded(make_result):
    evaluator = FakeEvaluator(make_result, delay_s=0.3)
    svc = service(evaluator, concurrency=2)
    started = time.monotonic()
    svc.score_sync([request(f"slow{i}") for i in range(4)])
    elapsed = time.monotonic() - started
    assert evaluator.max_running == 2
    assert elapsed < 1.0  # two waves of 0.3 s, not four


def test_runner_failures_become_crash_verdicts_and_are_retried(make_result):
    evaluator = FakeEvaluator(make_result)
    svc = service(evaluator)
    record = svc.score_sync([request("boom")])[0]
    assert record.status == "crash" and record.reward == -1.0
    svc.score_sync([request("boom")])
    assert len(evaluator.calls) == 2


def test_cache_file_survives_a_restart(make_result, tmp_path):
    path = tmp_path / "cache.jsonl"
    first = FakeEvaluator(make_result)
    service(first, cache_path=str(path)).score_sync([request("fast")])
    second = FakeEvaluator(make_result)
    record = service(second, cache_path=str(path)).score_sync([request("fast")])[0]
    assert record.cached and record.accepted and second.calls == []
    assert record.provenance["gpu"] == "NVIDIA H100 80GB HBM3"


def test_async_api_runs_inside_a_running_loop(make_result):
    svc = service(FakeEvaluator(make_result))

    async def main():
        return await svc.score([request("fast"), request("slow")])

    assert [r.accepted for r in asyncio.run(main())] == [True, True]


def test_config_is_validated():
    with pytest.raises(ValueError, match="local, ray"):
        ServiceConfig(executor="slurm")


def test_local_cuda_evaluations_run_one_at_a_time():
    with pytest.raises(ValueError, match="one at a time"):
        ServiceConfig(device="cuda", backend="cuda", concurrency=2)
    assert ServiceConfig(device="cuda", executor="ray", concurrency=8).concurrency == 8


def test_a_verdict_one_service_measured_serves_another_that_shares_the_cache_file(make_result, tmp_path):
    path = tmp_path / "shared.jsonl"
    first, second = FakeEvaluator(make_result), FakeEvaluator(make_result)
    a, b = service(first, cache_path=str(path)), service(second, cache_path=str(path))  # both started empty
    a.score_sync([request("fast")])
    record = b.score_sync([request("fast")])[0]
    assert record.cached and record.accepted and second.calls == []


WRITER = """
import sys, time
from agentforge.evaluator.result import ErrorRecord, EvalResult, Stage, Status
from agentforge.rl.reward_cache import CacheFile
name, count, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
cache = CacheFile(sys.argv[4])
while time.time() < start:
    time.sleep(0.005)
seen = 0
for i in range(count):
    message = f"{name}-{i}:" + "x" * 30000  # lines far above a pipe's or a buffer's atomic size
    result = EvalResult(task_name=name, candidate_hash=str(i), backend="cpu", status=Status.CRASH,
                        stage=Stage.SANDBOX, error=ErrorRecord(type="t", message=message))
    cache.append(f"{name}|{i}", result)
    seen += len(cache.read_new())  # reads while the others write: a torn line would warn
print(seen)
"""


def test_processes_appending_to_one_cache_file_at_once_lose_nothing(tmp_path):
    import subprocess
    import sys
    import warnings

    from agentforge.rl.reward_cache import CacheFile

    path, writers, count = tmp_path / "cache.jsonl", 4, 40
    start = time.time() + 3.0  # all start writing together, once their imports are done
    procs = [subprocess.Popen([sys.executable, "-W", "error::RuntimeWarning", "-c", WRITER, f"w{w}", str(count),
                               str(start), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(writers)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * writers, [err[-2000:] for _, err in outs]
    assert all(int(out) >= count for out, _ in outs)  # each saw at least its own entries come back
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        entries = CacheFile(path).read_new()
    assert len(entries) == writers * count
    for key, result in entries.items():
        name, i = key.split("|")
        assert result.task_name == name and result.error.message == f"{name}-{i}:" + "x" * 30000
    assert len(path.read_text().splitlines()) == writers * count


def test_a_cut_short_cache_file_is_read_up_to_its_last_whole_line(make_result, tmp_path):
    import warnings

    from agentforge.rl.reward_cache import CacheFile

    path = tmp_path / "cache.jsonl"
    CacheFile(path).append("k1", make_result())
    with path.open("a") as handle:
        handle.write('not json\n{"key": "k2", "res')  # a bad line, then one cut short by a crash
    reader = CacheFile(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert set(reader.read_new()) == {"k1"}
    assert "skipped 1 line" in str(caught[0].message)
    with path.open("a") as handle:
        handle.write('ult": 1}\n')  # the rest of the cut line arrives: still no entry, no crash
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert reader.read_new() == {}


def test_evaluations_on_a_node_claim_distinct_devices_and_wait_for_a_free_one(tmp_path):
    from agentforge.rl.ray_eval import claim_device

    got: list[int] = []

    def third() -> None:
        with claim_device(2, tmp_path, poll_s=0.05) as index:
            got.append(index)

    with claim_device(2, tmp_path) as a:
        with claim_device(2, tmp_path) as b:
            assert {a, b} == {0, 1}
            waiter = threading.Thread(target=third)
            waiter.start()
            time.sleep(0.3)
            assert got == []  # both devices are held: the third evaluation waits
        waiter.join(5)
        assert got == [b]  # it takes the device that was given back
    with pytest.raises(RuntimeError, match="no CUDA device on this node"), claim_device(0, tmp_path):
        pass


class CancellableEvaluator(FakeEvaluator):
    """Records cancellations and lets the hung evaluation end, as a cancelled Ray task does."""

    def __init__(self, make_result):
        super().__init__(make_result)
        self.cancelled: list[str] = []

    def __call__(self, job: EvalJob):
        result = super().__call__(job)
        if job.candidate_source in self.cancelled:
            raise RuntimeError("task cancelled")  # as ray.get raises for a cancelled task
        return result

    def cancel(self, job: EvalJob) -> None:
        self.cancelled.append(job.candidate_source)
        self.release.set()


def test_an_evaluation_is_cancelled_only_when_every_waiting_request_gave_up(make_result):
    evaluator = CancellableEvaluator(make_result)
    svc = service(evaluator, request_timeout_s=30)
    impatient = RewardRequest("level1/relu", "# task", reply("hang"), timeout_s=0.3)
    patient = RewardRequest("level1/relu", "# task", reply("hang"), timeout_s=1.5)

    async def both():
        return await asyncio.gather(svc.score_one(impatient), svc.score_one(patient))

    started = time.monotonic()
    first, second = asyncio.run(both())
    assert first.status == "timeout" and second.status == "timeout"
    assert 1.4 < time.monotonic() - started < 5  # the patient one waited its own deadline
    assert len(evaluator.cancelled) == 1 and "hang" in evaluator.cancelled[0]  # once, by the last
    assert svc.stats.timeouts == 2 and svc.stats.cancelled == 1 and len(evaluator.calls) == 1
    # The cancelled evaluation left no verdict: the next request starts a fresh one.
    time.sleep(0.1)
    evaluator.release.clear()
    again = svc.score_sync([RewardRequest("level1/relu", "# task", reply("hang"), timeout_s=0.2)])[0]
    assert again.status == "timeout" and not again.cached and len(evaluator.calls) == 2


def test_a_request_that_outlives_another_ones_deadline_gets_the_verdict(make_result):
    evaluator = CancellableEvaluator(make_result)
    svc = service(evaluator, request_timeout_s=30)
    impatient = RewardRequest("level1/relu", "# task", reply("hang fast"), timeout_s=0.2)
    patient = RewardRequest("level1/relu", "# task", reply("hang fast"))

    async def both():
        first = asyncio.ensure_future(svc.score_one(impatient))
        second = asyncio.ensure_future(svc.score_one(patient))
        out = await first
        evaluator.release.set()  # the evaluation ends after the first request gave up
        return out, await second

    first, second = asyncio.run(both())
    assert first.status == "timeout" and second.accepted
    assert evaluator.cancelled == [] and svc.stats.cancelled == 0


def test_a_local_evaluation_outlives_its_request_by_a_short_grace_only():
    from agentforge.rl.service import default_evaluate_fn

    assert default_evaluate_fn(ServiceConfig(request_timeout_s=30)).sandbox_options["timeout_s"] == 40.0
    explicit = ServiceConfig(request_timeout_s=30, sandbox_options={"timeout_s": 600.0})
    assert default_evaluate_fn(explicit).sandbox_options["timeout_s"] == 600.0
