"""The Ray sandbox backend: evaluation jobs as Ray tasks spread over a cluster's GPUs.

Each job becomes one Ray task that asks for one GPU (a CUDA job) or `cpus_per_job` CPUs (a CPU
job), so Ray never places two timed jobs on one GPU at once. On its node the task runs the job
through the local process sandbox (`agentforge.sandbox.run`), so isolation and limits are the
same as on one machine. A worker that dies mid-job (node lost, OOM-killed, `os._exit`) is
retried by Ray up to `max_retries` times on any node; the parent collects each job's result
exactly once, keyed by the job's content hash, and identical jobs are evaluated once.

Options come from `SandboxConfig.extra` (set by `from_settings` or the caller):
`ray_address` (None: start a local cluster; "auto": join the running one), `ray_max_retries`
(default 3), `ray_cpus_per_job` (default 1), `ray_max_in_flight` (default: no limit beyond
the cluster's resources).

Ray is an optional extra (`pip install agentforge[distributed]`); it is imported only when
this backend is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from agentforge.evaluator.result import ErrorRecord, EvalJob, EvalProvenance, EvalResult, Stage, Status
from agentforge.sandbox.config import SandboxConfig
from agentforge.sandbox.registry import register_backend

Runner = Callable[[EvalJob, SandboxConfig], EvalResult]
OnResult = Callable[[int, EvalResult], None]

DEFAULT_MAX_RETRIES = 3


def job_hash(job: EvalJob) -> str:
    """The identity of a job: equal jobs are evaluated and counted once."""
    return hashlib.sha256(job.to_json().encode()).hexdigest()[:32]


def _local_run(job: EvalJob, config: SandboxConfig) -> EvalResult:
    from agentforge.sandbox import run

    return run(job, config)


def _evaluate_on_node(job_json: str, config: SandboxConfig, runner: Runner | None) -> str:
    """The body of a Ray task: one job through the node's local process sandbox."""
    job = EvalJob.from_json(job_json)
    result = (runner or _local_run)(job, config)
    return result.to_json()


class RayBackend:
    """Runs jobs on a Ray cluster; `runner` replaces the node-local sandbox (tests, benchmarks)."""

    def __init__(self, config: SandboxConfig, *, address: str | None = None, runner: Runner | None = None):
        self.config = config
        self.address = address if address is not None else config.extra.get("ray_address")
        self.runner = runner
        self.max_retries = int(config.extra.get("ray_max_retries", DEFAULT_MAX_RETRIES))
        self.cpus_per_job = float(config.extra.get("ray_cpus_per_job", 1))
        self.max_in_flight = config.extra.get("ray_max_in_flight")
        # On the node, the job runs in the local process sandbox on the GPU Ray assigned.
        self.node_config = dataclasses.replace(config, kind="process", gpus=())

    # ----- public -------------------------------------------------------------------------
    def run(self, job: EvalJob) -> EvalResult:
        return self.run_many([job])[0]

    def run_many(
        self, jobs: Sequence[EvalJob], workers: int | None = None, on_result: OnResult | None = None,
    ) -> list[EvalResult]:
        """Every job's result, in input order; `on_result(index, result)` fires once per input
        as results arrive. On a cluster the resources (a GPU per CUDA job) bound concurrency:
        `workers` > 1 caps the jobs in flight further; 1 or None (the library-wide default)
        leaves it to Ray, then `ray_max_in_flight` applies."""
        ray = self._ray()
        remote = ray.remote(_evaluate_on_node)
        keys = [job_hash(j) for j in jobs]
        indices: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            indices.setdefault(key, []).append(i)
        first_index = {key: where[0] for key, where in indices.items()}
        pending_keys = list(first_index)
        cap = workers if workers and workers > 1 else (self.max_in_flight or len(pending_keys) or 1)
        results: dict[str, EvalResult] = {}
        in_flight: dict[Any, str] = {}
        while pending_keys or in_flight:
            while pending_keys and len(in_flight) < cap:
                key = pending_keys.pop(0)
                job = jobs[first_index[key]]
                ref = remote.options(**self._resources(job)).remote(
                    _for_node(job).to_json(), self.node_config, self.runner)
                in_flight[ref] = key
            done, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in done:
                key = in_flight.pop(ref)
                if key in results:  # never count a job twice
                    continue
                results[key] = self._collect(ray, ref, jobs[first_index[key]])
                if on_result is not None:
                    for i in indices[key]:
                        on_result(i, results[key])
        return [results[k] for k in keys]

    # ----- internals ----------------------------------------------------------------------
    def _ray(self) -> Any:
        try:
            import ray
        except ImportError as exc:
            raise RuntimeError("the ray sandbox needs Ray: pip install 'agentforge[distributed]'") from exc
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                     ignore_reinit_error=True)
        return ray

    def _resources(self, job: EvalJob) -> dict[str, Any]:
        options: dict[str, Any] = {"max_retries": self.max_retries, "retry_exceptions": False}
        if job.device.startswith("cuda") and not job.compile_only:
            options.update(num_gpus=1, num_cpus=self.cpus_per_job)
        else:
            options.update(num_gpus=0, num_cpus=self.cpus_per_job)
        return options

    def _collect(self, ray: Any, ref: Any, job: EvalJob) -> EvalResult:
        try:
            return EvalResult.from_json(ray.get(ref))
        except Exception as exc:  # retries exhausted, or the task itself raised
            return _lost(job, exc, self.max_retries)


def _for_node(job: EvalJob) -> EvalJob:
    """Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigned: the job uses that one."""
    return dataclasses.replace(job, device="cuda") if job.device.startswith("cuda:") else job


def _lost(job: EvalJob, exc: Exception, retries: int) -> EvalResult:
    from agentforge.candidate import code_hash

    return EvalResult(
        task_name=job.task_name, candidate_hash=code_hash(job.candidate_source), backend=job.backend,
        status=Status.CRASH, stage=Stage.SANDBOX,
        error=ErrorRecord(type=type(exc).__name__,
                          message=f"the Ray task failed after {retries} retries: {str(exc)[:500]}"),
        provenance=EvalProvenance(track=job.track, sandbox="ray"),
        candidate_meta=dict(job.candidate_meta),
    )


def run(job: EvalJob, config: SandboxConfig) -> EvalResult:
    """One job on the cluster named by `config.extra['ray_address']` (local when unset)."""
    return RayBackend(config).run(job)


def run_many(
    jobs: Sequence[EvalJob], config: SandboxConfig, workers: int | None = None,
    on_result: OnResult | None = None,
) -> list[EvalResult]:
    return RayBackend(config).run_many(jobs, workers=workers, on_result=on_result)


def factory(config: SandboxConfig) -> RayBackend:
    """For the sandbox's backend registry."""
    return RayBackend(config)


# The registry imports this module on the first `get_backend("ray")`; this line is why.
register_backend("ray", factory)
