"""Evaluation throughput (candidates per minute) and the overhead each layer adds per job.

    python benchmarks/eval_throughput.py [--jobs 8] [--workers 1 2] [--machine NAME] [--ray]

Measured, each on the same machine in one invocation:

- `sandbox_noop`: a job whose entry returns at once: the process sandbox's own cost per job
  (spawn, isolation, limits, the result channel, the child's interpreter start).
- `sandbox_noop_warm`: the same with one warm spare (`SandboxConfig.warm_spares`), each job 5 s
  after the one before (as an agent's next candidate follows its LLM calls).
- `evaluate_lean`: full evaluations (build, correctness, integrity, timing against eager) of
  distinct lean-form C++ ReLU candidates (64 Ki floats) on the CPU backend, at each worker
  count. Each candidate is new source text, so every job builds (no cache hits).
- `runner_overhead`: `leaderboard eval` bookkeeping per job (folder scan, job planning, store
  writes to SQLite), with an executor that answers at once.
- `ray_dispatch` (with --ray): a local Ray cluster running jobs whose node-side runner answers
  at once: Ray's per-job scheduling and collection cost, cluster start excluded.

Writes results/benchmarks/eval_throughput-<machine>.json (and prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

N = 1 << 16

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
"""

LEAN = '''
import ctypes
import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

_lib = load_cpp("relu_bench_VARIANT", r"""
extern "C" void relu(const float* x, float* y, long n) {
    // variant VARIANT
    for (long i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
""")

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
        return y
'''


def noop_entry(job):  # the sandbox child's entry for `sandbox_noop`
    from agentforge.evaluator.result import EvalResult, Stage, Status

    from agentforge.candidate import code_hash

    return EvalResult(task_name=job.task_name, candidate_hash=code_hash(job.candidate_source),
                      backend=job.backend, status=Status.OK, stage=Stage.DONE)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _jobs(n: int, cache: str, device: str, quick: bool) -> list:
    from agentforge.evaluator.api import make_job
    from agentforge.evaluator.result import Measure

    from agentforge.candidate import Candidate
    from agentforge.task import Task

    task = Task("bench/relu", TASK)
    measure = Measure(baselines=("eager",), compile_modes=(), timing=not quick)
    return [make_job(task, Candidate(LEAN.replace("VARIANT", f"{os.getpid()}_{i}_{time.time_ns()}"),
                                     backend="cpu"), device=device, measure=measure, cache_dir=cache)
            for i in range(n)]


def bench_sandbox_noop(n: int, cache: str, warm_spares: int = 0, pause_s: float = 0.0) -> dict:
    """Seconds per no-op job, one at a time. With `warm_spares`, a first job (not counted) starts
    the spare, and each counted job comes `pause_s` after the one before, as an agent's next
    candidate comes after its LLM calls."""
    from agentforge.sandbox import SandboxConfig, spares

    from agentforge.evaluation import evaluate_many

    config = SandboxConfig(cache_dir=cache, entry="eval_throughput:noop_entry",
                           python_paths=(str(Path(__file__).resolve().parent),), warm_spares=warm_spares)
    jobs = _jobs(n + 1, cache, "cpu", quick=True)
    results = evaluate_many(jobs[:1], config)
    per_job = []
    for job in jobs[1:]:
        time.sleep(pause_s)
        per_job.append(_timed(lambda job=job: evaluate_many([job], config)))
    spares.discard_all()
    return {"jobs": n, "warm_spares": warm_spares, "pause_s": pause_s, "median_s_per_job": statistics.median(per_job),
            "min_s": min(per_job), "max_s": max(per_job), "status": results[0].status.value}


def bench_evaluate(n: int, workers: Sequence[int], cache: str, device: str) -> list[dict]:
    from agentforge.sandbox import SandboxConfig

    from agentforge.evaluation import evaluate_many

    rows = []
    for w in workers:
        config = SandboxConfig(cache_dir=cache, timeout_s=600, warm_spares=w)
        jobs = _jobs(n, cache, device, quick=False)
        start = time.perf_counter()
        results = evaluate_many(jobs, config, workers=w)
        wall = time.perf_counter() - start
        inside = [r.provenance.duration_s for r in results]
        rows.append({
            "device": device, "workers": w, "jobs": n, "wall_s": wall,
            "candidates_per_minute": 60.0 * n / wall,
            "median_evaluator_s": statistics.median(inside),  # inside the child, per job
            "statuses": sorted({r.status.value for r in results}),
        })
    return rows


def bench_runner_overhead(n: int) -> dict:
    from agentforge.evaluator.result import EvalResult, Stage, Status

    from agentforge.leaderboard.runner import JobOptions, eval_kernels
    from agentforge.leaderboard.suites import load_suite
    from agentforge.store import ResultsStore

    root = Path(tempfile.mkdtemp(prefix="agentforge-bench-"))
    try:
        (root / "tasks" / "level1").mkdir(parents=True)
        (root / "kernels").mkdir()
        for i in range(n):
            (root / "tasks" / "level1" / f"{i + 1}_Relu.py").write_text(TASK)
            (root / "kernels" / f"level_1_problem_{i + 1}_sample_0_kernel.py").write_text(LEAN)

        def instant(jobs, on_result):
            out = []
            for job in jobs:
                r = EvalResult(task_name=job.task_name, candidate_hash="x", backend=job.backend, status=Status.OK,
                               stage=Stage.DONE, candidate_meta=dict(job.candidate_meta))
                on_result(r)
                out.append(r)
            return out

        suite = load_suite("tasks", root / "tasks")
        with ResultsStore(f"sqlite:///{root / 'bench.db'}") as store:
            options = JobOptions(tracks=("hardened",))
            first = _timed(lambda: eval_kernels(suite, root / "kernels", store=store, entry="bench",
                                                options=options, executor=instant))
            resumed = _timed(lambda: eval_kernels(suite, root / "kernels", store=store, entry="bench",
                                                  options=options, executor=instant))
        return {"jobs": n, "s_per_job": first / n, "resume_s_per_job": resumed / n}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def instant_runner(job, config):  # the node-side runner for `ray_dispatch`
    return noop_entry(job)


def bench_ray(n: int, cache: str) -> dict:
    import ray
    from agentforge.sandbox.config import SandboxConfig
    from agentforge.sandbox.ray_backend import RayBackend

    start = time.perf_counter()
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    started = time.perf_counter() - start
    try:
        import ray.cloudpickle

        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        backend = RayBackend(SandboxConfig(kind="ray", cache_dir=cache), runner=instant_runner)
        jobs = _jobs(n, cache, "cpu", quick=True)
        backend.run_many(jobs[:2])  # warm the workers
        wall = _timed(lambda: backend.run_many(jobs))
    finally:
        ray.shutdown()
    return {"jobs": n, "cluster_start_s": started, "s_per_job": wall / n, "jobs_per_minute": 60 * n / wall}


def machine_info() -> dict:
    import torch

    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "load_avg_at_start": os.getloadavg()[0]}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=6, help="jobs per measurement")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--machine", default=None, help="name in the output file (default: cpu-<cores>core)")
    parser.add_argument("--ray", action="store_true", help="also measure Ray dispatch on a local cluster")
    parser.add_argument("--start-only", action="store_true", help="only the sandbox's start per job, cold and warm")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "benchmarks")
    args = parser.parse_args(argv)

    import torch

    cache = tempfile.mkdtemp(prefix="agentforge-bench-cache-")
    os.chmod(cache, 0o777)  # the sandbox child runs as nobody when this runs as root
    try:
        report = {"benchmark": "eval_throughput", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "machine": machine_info(), "notes": __doc__.split("\n\n", 2)[2].strip()}
        report["sandbox_noop"] = bench_sandbox_noop(args.jobs, cache)
        report["sandbox_noop_warm"] = bench_sandbox_noop(args.jobs, cache, warm_spares=1, pause_s=5.0)
        if args.start_only:
            args.workers = []
        else:
            report["runner_overhead"] = bench_runner_overhead(max(50, args.jobs))
        report["evaluate_lean"] = bench_evaluate(args.jobs, args.workers, cache, "cpu")
        if args.ray:
            report["ray_dispatch"] = bench_ray(max(20, args.jobs), cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    gpu = torch.cuda.is_available()
    name = args.machine or (f"gpu-{torch.cuda.get_device_name(0)}" if gpu else f"cpu-{os.cpu_count()}core")
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"eval_throughput{'_start' if args.start_only else ''}-{name}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
