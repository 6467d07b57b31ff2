"""The reward service: completions in, `RewardRecord`s out, evaluated in the background.

An asynchronous client over the evaluator. Each distinct candidate is evaluated once per
(task, task source, code hash, evaluator version, track, device, backend); repeats are served
from the cache (memory, and a JSONL file when `cache_path` is set, shared with every other process
that names it: see reward_cache.py). Evaluations run on daemon threads, at most `concurrency` at
once, each calling `evaluate(job)` (an isolated sandbox child per job, as `evaluate_many` does)
or a Ray task (ray_eval.py).

A request's timeout starts when its evaluation starts, not while it queues; a request may ask for
a shorter one (`RewardRequest.timeout_s`). When it expires the request gets a `timeout` verdict.
Once every request waiting on an evaluation has timed out, its slot is handed to the next job and
the evaluation is abandoned: a Ray task is cancelled (its sandbox child killed); a local one is
left to the sandbox's own wall-clock limit (by default `request_timeout_s` + 10 s). One hung
candidate never blocks the training step, nor the candidates queued behind it. Another process
reaches the service over HTTP (reward_server.py).

A task that fails on its own (a `task_error` verdict: it does not import, or its inputs or
reference fail) is not evaluated again: later completions for it are answered at once with that
verdict (the rewarder's `task_error_reward`), the task and the reason land in
`stats.broken_tasks`, and one warning says so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import hashlib
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentforge.evaluator.result import (
    EVALUATOR_VERSION,
    ErrorRecord,
    EvalJob,
    EvalResult,
    Stage,
    Status,
)
from agentforge.rl.ray_eval import RayEvaluate
from agentforge.rl.records import RewardRecord
from agentforge.rl.reward_cache import CacheFile
from agentforge.rl.rewards import Rewarder

from agentforge.candidate import Candidate, NoCodeError, code_hash, extract_code

EvaluateFn = Callable[[EvalJob], EvalResult]
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class RewardRequest:
    """One completion to score, for one task."""

    task_name: str
    task_source: str
    completion: str  # the model's raw reply; code is extracted here, in one place
    reference_speedup: float | None = None  # the shipped reference kernel's speedup vs eager
    meta: dict[str, Any] = field(default_factory=dict)  # carried into the record
    timeout_s: float | None = None  # a deadline shorter than the service's request_timeout_s


@dataclass(frozen=True)
class ServiceConfig:
    backend: str = "cpu"  # cpu | cuda | triton: the candidates' backend
    device: str = "cpu"  # cpu | cuda[:N]
    track: str = "hardened"
    concurrency: int = 2  # evaluations running at once
    request_timeout_s: float = 300.0  # per evaluation, from its start
    executor: str = "local"  # local: sandbox children on this machine | ray: Ray tasks
    ray_address: str | None = None  # None: ray.init() decides (a running cluster or a local one)
    ray_num_gpus: float = 0.0  # GPUs each Ray evaluation task reserves
    ray_resources: dict[str, float] = field(default_factory=dict)  # custom Ray resources each task reserves
    cache_path: str | None = None  # JSONL of evaluated results, shared by processes (reward_cache.py)
    job_options: dict[str, Any] = field(default_factory=dict)  # make_job's keywords (measure, timing, ...)
    sandbox_options: dict[str, Any] = field(default_factory=dict)  # SandboxConfig's fields, for local runs

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            choices = ", ".join(EXECUTORS)
            raise ValueError(f"unknown reward executor {self.executor!r}; choose one of {choices}")
        if self.concurrency < 1 or self.request_timeout_s <= 0:
            raise ValueError("concurrency must be >= 1 and request_timeout_s > 0")
        if any(not isinstance(v, int | float) or v <= 0 for v in self.ray_resources.values()):
            raise ValueError(f"ray_resources must map resource names to positive amounts, not {self.ray_resources}")
        if self.executor == "local" and self.device.startswith("cuda") and self.concurrency > 1:
            # Two children timing on one GPU at once corrupt each other's measurements.
            raise ValueError("local CUDA evaluations must run one at a time (concurrency = 1); "
                             "use executor = 'ray' with one GPU per task to evaluate in parallel")


@dataclass
class ServiceStats:
    requests: int = 0
    no_code: int = 0
    cache_hits: int = 0
    evaluations: int = 0
    timeouts: int = 0
    cancelled: int = 0  # abandoned evaluations stopped (Ray tasks)
    task_errors: int = 0  # requests answered with a task_error verdict (evaluated or not)
    broken_tasks: dict[str, str] = field(default_factory=dict)  # task -> why it fails on its own


class _Run:
    """One evaluation in flight, shared by every request for the same key."""

    def __init__(self, job: EvalJob) -> None:
        self.job = job
        self.future: concurrent.futures.Future[EvalResult] = concurrent.futures.Future()
        self.started = threading.Event()
        self.started_at = 0.0
        self.lock = threading.Lock()
        self.holds_slot = False
        self.waiters = 0  # requests awaiting its verdict


class RewardService:
    """Scores completions with the evaluator, concurrently, cached, with per-request timeouts."""

    def __init__(self, rewarder: Rewarder, config: ServiceConfig | None = None,
                 evaluate_fn: EvaluateFn | None = None,
                 job_factory: Callable[[RewardRequest, str], EvalJob] | None = None) -> None:
        self.rewarder = rewarder
        self.config = config or ServiceConfig()
        self._evaluate = evaluate_fn or default_evaluate_fn(self.config)
        self._make_job = job_factory or functools.partial(make_eval_job, config=self.config)
        self._slots = threading.Semaphore(self.config.concurrency)
        self._lock = threading.Lock()
        self._cache: dict[str, EvalResult] = {}
        self._broken: dict[str, EvalResult] = {}  # task key -> its task_error verdict
        self._runs: dict[str, _Run] = {}
        self.stats = ServiceStats()
        self._file = CacheFile(self.config.cache_path) if self.config.cache_path else None
        if self._file is not None:
            self._cache.update(self._file.read_new())

    # ----- the client API -------------------------------------------------------------------
    async def score(self, requests: Sequence[RewardRequest]) -> list[RewardRecord]:
        """Reward every request, concurrently; order preserved; never raises for a candidate."""
        return list(await asyncio.gather(*(self.score_one(r) for r in requests)))

    def score_sync(self, requests: Sequence[RewardRequest]) -> list[RewardRecord]:
        return asyncio.run(self.score(requests))

    async def score_one(self, request: RewardRequest) -> RewardRecord:
        self.stats.requests += 1
        try:
            code = extract_code(request.completion)
        except NoCodeError:
            self.stats.no_code += 1
            return self.rewarder.no_code(request.task_name, request.meta)
        key = self.cache_key(request, code)
        with self._lock:
            cached = self._cache.get(key)
        if cached is None and self._file is not None:  # measured by another process meanwhile?
            fresh = self._file.read_new()
            with self._lock:
                self._cache.update(fresh)
                cached = self._cache.get(key)
        with self._lock:
            broken = self._broken.get(self._task_key(request))
        if cached is not None:
            self.stats.cache_hits += 1
            return self._scored(cached, request, cached=True)
        if broken is not None:  # the task fails on its own: no completion can change that
            return self._scored(dataclasses.replace(broken, candidate_hash=code_hash(code)), request, cached=True)
        try:
            job = self._make_job(request, code)
        except Exception as exc:  # a task that cannot be loaded is the caller's bug: say so
            raise RuntimeError(f"cannot build an evaluation job for {request.task_name}: {exc}") from exc
        timeout_s = self.config.request_timeout_s
        if request.timeout_s is not None:
            timeout_s = min(timeout_s, request.timeout_s)
        result = await self._await(key, self._start(key, job), job, timeout_s)
        if result.status == Status.TASK_ERROR:
            self._mark_broken(request, result)
        return self._scored(result, request)

    def _scored(self, result: EvalResult, request: RewardRequest, cached: bool = False) -> RewardRecord:
        if result.status == Status.TASK_ERROR:
            self.stats.task_errors += 1
        return self.rewarder.score(result, request.reference_speedup, request.meta, cached=cached)

    def _task_key(self, request: RewardRequest) -> str:
        task_hash = hashlib.sha256(request.task_source.encode()).hexdigest()[:16]
        cfg = self.config
        return "|".join((request.task_name, task_hash, cfg.track, cfg.device, cfg.backend))

    def _mark_broken(self, request: RewardRequest, result: EvalResult) -> None:
        error = result.error
        why = f"{error.type}: {error.message}" if error is not None else "task error"
        with self._lock:
            first = self._broken.setdefault(self._task_key(request), result) is result
            if first:
                self.stats.broken_tasks[request.task_name] = why
        if first:
            warnings.warn(f"reward: task {request.task_name} fails on its own ({why}); its completions get "
                          f"{self.rewarder.config.task_error_reward:g} from now on, without being evaluated",
                          RuntimeWarning, stacklevel=2)

    def cache_key(self, request: RewardRequest, code: str) -> str:
        task_hash = hashlib.sha256(request.task_source.encode()).hexdigest()[:16]
        cfg = self.config
        return "|".join((request.task_name, task_hash, code_hash(code), EVALUATOR_VERSION,
                         cfg.track, cfg.device, cfg.backend))

    # ----- background evaluation ------------------------------------------------------------
    def _start(self, key: str, job: EvalJob) -> _Run:
        with self._lock:
            run = self._runs.get(key)
            if run is not None:
                self.stats.cache_hits += 1
                with run.lock:
                    run.waiters += 1
                return run
            run = self._runs[key] = _Run(job)
            run.waiters = 1
        self.stats.evaluations += 1
        threading.Thread(target=self._work, args=(key, job, run), daemon=True,
                         name=f"reward-{job.task_name}").start()
        return run

    def _work(self, key: str, job: EvalJob, run: _Run) -> None:
        self._slots.acquire()
        with run.lock:
            run.holds_slot = True
        run.started_at = time.monotonic()
        run.started.set()
        try:
            result = self._evaluate(job)
            keep = True
        except Exception as exc:  # the runner itself failed (e.g. Ray lost a worker)
            result = _failure(job, Status.CRASH, "reward_runner_error", f"{type(exc).__name__}: {exc}")
            keep = False
        finally:
            self._release(run)
        with self._lock:
            if self._runs.get(key) is run:
                del self._runs[key]
            if keep:
                self._cache[key] = result
        if keep and self._file is not None:
            self._file.append(key, result)
        if not run.future.done():
            run.future.set_result(result)

    def _release(self, run: _Run) -> None:
        with run.lock:
            if run.holds_slot:
                run.holds_slot = False
                self._slots.release()

    async def _await(self, key: str, run: _Run, job: EvalJob, timeout_s: float) -> EvalResult:
        while not run.started.is_set() and not run.future.done():
            await asyncio.sleep(0.02)  # queued: the clock has not started
        remaining = timeout_s - (time.monotonic() - run.started_at)
        try:
            verdict = asyncio.shield(asyncio.wrap_future(run.future))
            return await asyncio.wait_for(verdict, max(remaining, 0.0))
        except TimeoutError:
            self.stats.timeouts += 1
            self._give_up(key, run)
            return _failure(job, Status.TIMEOUT, "reward_timeout", f"no verdict within {timeout_s:g} s")

    def _give_up(self, key: str, run: _Run) -> None:
        """One waiter fewer; the last one abandons the evaluation: its slot goes to the next job,
        a later request for the same candidate starts afresh, and a cancellable runner stops it."""
        with run.lock:
            run.waiters -= 1
            last = run.waiters <= 0
        if not last or run.future.done():
            return
        with self._lock:
            if self._runs.get(key) is run:
                del self._runs[key]
        self._release(run)
        cancel = getattr(self._evaluate, "cancel", None)
        if cancel is None:
            return
        try:
            cancel(run.job)
            self.stats.cancelled += 1
        except Exception as exc:
            warnings.warn(f"reward: could not cancel the abandoned evaluation of {run.job.task_name}: {exc}",
                          RuntimeWarning, stacklevel=2)


# ----- evaluation jobs and runners ----------------------------------------------------------
def make_eval_job(request: RewardRequest, code: str, config: ServiceConfig) -> EvalJob:
    """The evaluator's job for one extracted candidate, through `evaluator.api.make_job`. The task
    is not imported here (the trainer's process): a broken one is found in the sandbox, as a
    task_error verdict."""
    from agentforge.evaluator.api import make_job

    from agentforge.task import TaskText

    candidate = Candidate(source=code, backend=config.backend)
    task = TaskText(request.task_name, request.task_source)
    return make_job(task, candidate, device=config.device, track=config.track, **job_keywords(config))


def job_keywords(config: ServiceConfig) -> dict[str, Any]:
    """`job_options` as make_job takes them: tables become Measure / TimingConfig / ... records."""
    from agentforge.evaluator.result import CorrectnessConfig, Measure, TimingConfig

    records = {"measure": Measure, "timing": TimingConfig, "correctness": CorrectnessConfig}
    keywords: dict[str, Any] = {}
    for key, value in config.job_options.items():
        if key in records and isinstance(value, dict):
            value = records[key](**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})
        elif isinstance(value, list):
            value = tuple(value)
        keywords[key] = value
    return keywords


ABANDONED_GRACE_S = 10.0  # how long a local evaluation may outlive its request's timeout


def default_evaluate_fn(config: ServiceConfig) -> EvaluateFn:
    if config.executor == "ray":
        return RayEvaluate(address=config.ray_address, num_gpus=config.ray_num_gpus,
                           sandbox_options=config.sandbox_options, resources=config.ray_resources)
    options = dict(config.sandbox_options)
    # A local evaluation cannot be cancelled: unless told otherwise, the sandbox's own wall-clock
    # limit ends an abandoned one soon after its request timed out, not 10 minutes later.
    options.setdefault("timeout_s", config.request_timeout_s + ABANDONED_GRACE_S)
    return LocalEvaluate(options)


@dataclass(frozen=True)
class LocalEvaluate:
    """`agentforge.evaluation.evaluate` in a sandbox child on this machine; picklable."""

    sandbox_options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, job: EvalJob) -> EvalResult:
        from agentforge.evaluation import evaluate

        sandbox = None
        if self.sandbox_options:
            from agentforge.sandbox.config import SandboxConfig

            sandbox = SandboxConfig(**self.sandbox_options)
        return evaluate(job, sandbox)


def _failure(job: EvalJob, status: Status, kind: str, message: str) -> EvalResult:
    return EvalResult(
        task_name=job.task_name, candidate_hash=code_hash(job.candidate_source), backend=job.backend,
        status=status, stage=Stage.SANDBOX, error=ErrorRecord(type=kind, message=message),
        candidate_meta=dict(job.candidate_meta),
    )
