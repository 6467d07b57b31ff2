"""`make gpu-check`: prove the GPU path on the first GPU at hand, in calls of at most 10 minutes.

    python3 scripts/gpu_check.py [--budget-s 540] [--out DIR] [--only STEP,...] [--plan]

Steps, in order (estimates for one H100 with a cold build cache; `--plan` prints them per call):

1. doctor           every prerequisite, ok or what to do (`agentforge.doctor`),
                    ncu's metric list for this GPU included
2. timing_fidelity  the evaluator's median (head start on, the default, and off) vs Triton's do_bench
                    vs ncu's gpu__time_duration on 6 kernels from ~2 us to ~2 ms, the SM clock beside
                    each; within 5 % above 20 us is the bar. Also what the candidate worker's operator
                    observer adds to a timed call of 3 and of 30 small operators
3. isolation        one CUDA reference kernel through the real sandbox in each isolation mode
4. profile          a sandboxed evaluation with the Nsight Compute profile on
5. gpu_tests        the `gpu`-marked tests (pytest -m gpu -v on the files that have them) with this
                    check's warm build cache; a run stopped at its limit is pending, and the next call
                    runs only the tests it had not finished
6. reference        every reference kernel of this GPU on its default shape: CUDA builds first, in
                    parallel, then each kernel timed against eager, and against torch.compile
                    (default) for a sample of COMPILE_SAMPLE (a cold compile in each fresh sandbox
                    costs 40-90 s); the calls after the first

Resumable: each finished step (and each measured reference kernel, each finished gpu test) is kept
in `results/gpu/<gpu>/state.json`; a step that would not finish inside `--budget-s` (counted from the
script's start, 20 s kept for the reports) is left for the next call, which skips what is done, and
every run inside a step is bounded by what is left. The device machine starts bare each time, so
bring the files back: `--out DIR` gets the state at every save and the reports (and the gpu tests'
log) at the end, also when a step raised (`make gpu-check OUT=$OUT`); copying them into
`results/gpu/<gpu>/` here makes the next call go on where this one stopped.
Writes `results/gpu/<gpu>/gpu_check.json` and `gpu_check.md` (GPU, driver, torch, date, per step).
Exit 0 when nothing failed (steps may be pending), 1 when a step failed, 2 when this interpreter's
torch cannot use the GPU that nvidia-smi sees (a CPU-only build: nothing would be measured).

Without a GPU (and no nvidia-smi seeing one) it prints this plan with its time estimates and exits
0. Imports only the standard library, torch, numpy, triton and the project (whose evaluator and
sandbox need nothing else).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.gettempdir()) / "agentforge-gpu-check"
SANDBOX_UID = 65534
BAR = 0.05  # timing fidelity: the evaluator within 5 % of ncu for kernels over 20 us
BAR_ABOVE_US = 20.0
_REEXEC = "AGENTFORGE_GPU_CHECK_REEXEC"
_STARTED = "AGENTFORGE_GPU_CHECK_STARTED"  # the first process's monotonic start, kept across the re-exec
MARGIN_S = 20.0  # left at the end of a call for the reports and the copy to --out
_STARTED_AT: list[float] = []


def left(deadline: float, cap: float) -> float:
    """Seconds an operation may take: `cap`, or less where the call's budget ends sooner."""
    return max(1.0, min(cap, deadline - time.monotonic() - MARGIN_S))


@dataclass(frozen=True)
class Step:
    name: str
    estimate_s: int
    what: str
    run: Callable[[dict[str, Any], float], dict[str, Any]]  # (state, deadline) -> result


# ----- set-up ---------------------------------------------------------------------------------
def ensure_importable() -> None:
    """The project installed (editable, offline) when this interpreter cannot import it yet."""
    try:
        importlib.import_module("agentforge.evaluator.result")
        return
    except ImportError:
        pass
    if os.environ.get(_REEXEC) == "1":
        raise SystemExit("gpu-check: the project was installed but still does not import")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-e", str(REPO)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:  # an old setuptools, no pip: the import name mapped by symbolic links
        print(f"gpu-check: pip could not install the checkout ({proc.stderr.strip()[-300:]}); using a path shim",
              flush=True)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path_shim()), os.environ.get("PYTHONPATH")]))
    # An editable install takes effect through a .pth file, read only when an interpreter starts.
    os.environ[_REEXEC] = "1"
    if _STARTED_AT:
        os.environ[_STARTED] = repr(_STARTED_AT[0])
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]])


def path_shim() -> Path:
    """A folder holding `agentforge` as the installed package lays it out (setup.py's mapping:
    agentforge/, evaluator/ -> agentforge.evaluator, ...), made of symbolic links to the checkout."""
    package = WORK / "path" / "agentforge"
    if not package.exists():
        package.mkdir(parents=True)
        for entry in (REPO / "agentforge").iterdir():
            (package / entry.name).symlink_to(entry)
        for folder in ("evaluator", "sandbox", "rl"):
            (package / folder).symlink_to(REPO / folder)
    return package.parent


def gpu_identity() -> dict[str, Any]:
    import torch

    from agentforge.doctor import driver_cuda_version, gather
    from agentforge.kernel_library import gpu_slug

    facts = gather()
    name = torch.cuda.get_device_name(0)
    return {"gpu": name, "slug": gpu_slug(name), "capability": facts.capability,
            "driver": facts.driver_version, "driver_cuda": driver_cuda_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def sandbox_config(isolation: str = "auto", **changes: Any) -> Any:
    """One cache and work root for the whole check, under /tmp (traversable by the sandbox user)."""
    from agentforge.sandbox import SandboxConfig

    shim = WORK / "path"
    paths = (str(shim),) if str(shim) in os.environ.get("PYTHONPATH", "") else ()
    return SandboxConfig(isolation=isolation, cache_dir=str(WORK / "cache"), workdir_root=str(WORK / "work"),
                         python_paths=paths, **changes)


# ----- 1. doctor ------------------------------------------------------------------------------
def step_doctor(state: dict[str, Any], deadline: float) -> dict[str, Any]:
    from dataclasses import asdict

    from agentforge import doctor

    started = time.monotonic()
    checks = doctor.run_checks()
    print(doctor.render_text(checks), flush=True)
    return {"ok": doctor.exit_code(checks) == 0, "seconds": round(time.monotonic() - started, 1),
            "checks": [asdict(c) for c in checks]}


# ----- 2. the gpu tests -----------------------------------------------------------------------
def gpu_test_files() -> list[str]:
    files = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text(errors="replace")
        if "mark.gpu" in text or "marker: gpu" in text:
            files.append(str(path.relative_to(REPO)))
    return files


GPU_TESTS_CAP_S = 300.0
PER_TEST_TIMEOUT_S = 280  # pytest-timeout's bound on one test, where the plugin is installed: above one
# sandboxed evaluation's 240 s, below the run's cap, so a hung test fails rather than stays pending
_OUTCOME = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def _text(part: str | bytes | None) -> str:
    """A TimeoutExpired's captured output: bytes even when the run asked for text."""
    if isinstance(part, bytes):
        return part.decode(errors="replace")
    return part or ""


def test_outcomes(output: str) -> dict[str, str]:
    """Each test's outcome from `pytest -v` lines (`tests/x.py::t PASSED [ 10%]`), the last one kept
    (a test whose teardown errs reports twice)."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        match = _OUTCOME.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    return found


def gpu_tests_argv(files: list[str], done: dict[str, str], per_test_s: int | None) -> list[str]:
    """pytest on the gpu-marked tests not yet done (a call cut short keeps what finished)."""
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider", "-rfEs", *files]
    if per_test_s is not None:
        argv += [f"--timeout={per_test_s}"]
    for node in sorted(done):
        argv += ["--deselect", node]
    return argv


def gpu_tests_env() -> dict[str, str]:
    """The tests' sandboxes build into gpu-check's own warm cache (prebuilt torch headers, the
    kernels the earlier steps built) rather than a cold one per test session."""
    cache = WORK / "cache"
    return {**os.environ, "AGENTFORGE_TEST_CACHE_DIR": str(cache),
            "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(cache / "torch_extensions"))}


def step_gpu_tests(state: dict[str, Any], deadline: float) -> dict[str, Any]:
    files = gpu_test_files()
    done: dict[str, str] = state.setdefault("gpu_tests_done", {})
    limit = left(deadline, GPU_TESTS_CAP_S)
    log = WORK / "gpu_tests.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    per_test = PER_TEST_TIMEOUT_S if importlib.util.find_spec("pytest_timeout") else None
    with open(log, "w") as sink:  # a file, not a pipe: what ran before a timeout is still there
        proc = subprocess.Popen(gpu_tests_argv(files, done, per_test), cwd=REPO, stdout=sink,
                                stderr=subprocess.STDOUT, env=gpu_tests_env(), start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = None
    out = log.read_text(errors="replace")
    print(out[-4000:], flush=True)
    done.update(test_outcomes(out))
    return gpu_tests_result(files, done, code, out, limit)


def gpu_tests_result(files: list[str], done: dict[str, str], code: int | None, out: str,
                     limit: float) -> dict[str, Any]:
    """The step's record. A run stopped at its limit is pending, never failed: the next call runs the
    tests it had not reached (`done` keeps each finished test's outcome across calls)."""
    failures = sorted(n for n, outcome in done.items() if outcome in ("FAILED", "ERROR", "XPASS"))
    counts = {o: sum(1 for v in done.values() if v == o) for o in sorted(set(done.values()))}
    summary = ", ".join(f"{n} {o.lower()}" for o, n in counts.items()) or "no test finished"
    record = {"files": files, "summary": summary, "failures": failures[:40], "tail": out[-3000:]}
    if code is None:
        return {**record, "ok": False, "pending": True, "summary": f"{summary}; stopped after {limit:.0f} s: "
                f"the next call runs the rest"}
    # pytest's 5: nothing was collected, all having run in an earlier call
    ok = not failures and (code == 0 or (code == 5 and bool(done)))
    return {**record, "ok": ok, "exit_code": code}


# ----- 3. timing fidelity ---------------------------------------------------------------------
FIDELITY_KERNELS = textwrap.dedent('''
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(0)

    def vectors(n):
        return [torch.randn(n, device=dev, generator=g) for _ in range(3)]

    a1, b1, o1 = vectors(1 << 12)
    a2, b2, o2 = vectors(1 << 20)
    a3, b3, o3 = vectors(1 << 24)
    a4, b4, o4 = vectors(1 << 27)
    sm = torch.randn(4096, 4096, device=dev, generator=g)
    ma, mb = (torch.randn(3072, 3072, device=dev, generator=g) for _ in range(2))
    mo = torch.empty(3072, 3072, device=dev)
    KERNELS = {
        "add_4k": lambda: torch.add(a1, b1, out=o1),
        "add_1m": lambda: torch.add(a2, b2, out=o2),
        "add_16m": lambda: torch.add(a3, b3, out=o3),
        "softmax_4096x4096": lambda: torch.softmax(sm, dim=1),
        "add_128m": lambda: torch.add(a4, b4, out=o4),
        "matmul_3072_fp32": lambda: torch.mm(ma, mb, out=mo),
    }
''')
NCU_REPS = 15


def _ncu_program(path: Path) -> None:
    """A program that runs one kernel of FIDELITY_KERNELS (argv[1]) NCU_REPS times in the NVTX range."""
    path.write_text(FIDELITY_KERNELS + textwrap.dedent(f'''
        import sys
        fn = KERNELS[sys.argv[1]]
        fn()  # warm: cuBLAS picks its kernel, the allocator caches
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("agentforge_candidate")
        for _ in range({NCU_REPS}):
            fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    '''))


def ncu_median_us(name: str, deadline: float) -> tuple[float | None, str]:
    """ncu's gpu__time_duration of one call of kernel `name` (all its launches summed; the median
    of NCU_REPS calls, caches flushed before each launch, clocks as the timing ran them)."""
    from agentforge.evaluator.hardware import ncu

    program = WORK / "fidelity_ncu.py"
    program.parent.mkdir(parents=True, exist_ok=True)
    _ncu_program(program)
    options = ncu.NcuOptions(metrics=("gpu__time_duration.sum",), cache_control="all", clock_control="none",
                             timeout_s=left(deadline, 180.0))
    record = ncu.profile_script(program, [name], options=options)
    if not record.available:
        return None, record.reason
    rows = [float(k.get("gpu__time_duration.sum") or 0.0) for k in record.kernels]
    if not rows or len(rows) % NCU_REPS:
        return None, f"ncu profiled {len(rows)} launches for {NCU_REPS} calls"
    per_call = len(rows) // NCU_REPS
    calls = [sum(rows[i * per_call:(i + 1) * per_call]) for i in range(NCU_REPS)]
    return statistics.median(calls) / 1e3, ""


def parse_sm_clocks(text: str) -> dict[str, int] | None:
    """`nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader,nounits` ("1980, 1980")."""
    parts = [p.strip() for p in text.strip().splitlines()[0].split(",")] if text.strip() else []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return {"sm_mhz": int(parts[0]), "sm_max_mhz": int(parts[1])}


def sm_clocks() -> dict[str, int] | None:
    """The SM clock now and its maximum, as nvidia-smi reads them (None when it cannot)."""
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits",
                               "-i", "0"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_sm_clocks(proc.stdout) if proc.returncode == 0 else None


def chain(n_ops: int) -> Callable[[Any], Any]:
    """A module of `n_ops` small elementwise operators: launch-bound, like eager's many ops (30) or a
    fused candidate's few (3)."""
    import torch

    def run(x: Any) -> Any:
        for _ in range(n_ops):
            x = torch.relu(x)
        return x
    return run


def observer_cost(device: Any, n_ops: tuple[int, ...] = (3, 30), heads: tuple[bool, ...] = (True, False),
                  reps: int = 60) -> list[dict[str, Any]]:
    """What the candidate worker's operator observer adds to a timed call: each chain timed by the
    evaluator's own loop with and without it, per head-start setting (CPU: the head start is moot)."""
    import torch
    from agentforge.evaluator import op_observer, timing
    from agentforge.evaluator.result import TimingConfig

    op_observer.warm_up()
    x = torch.randn(4096, device=device)
    rows = []
    for n in n_ops:
        for head in heads if device.type == "cuda" else (False,):
            config = TimingConfig(warmup=5, min_reps=reps, max_reps=reps, time_cap_s=2.0, flush_l2=True,
                                  fresh_inputs=False, recheck_fraction=0.0, head_start=head)
            medians = {}
            for observed in (False, True, False, True):  # twice each, alternated: drift falls on both
                subject = timing.Subject("chain", chain(n))
                with op_observer.observing() if observed else contextlib.nullcontext():
                    run = timing.run_interleaved([subject], [x], lambda rep: None, device, config, None)
                medians.setdefault(observed, []).append(statistics.median(run.subjects["chain"].samples_us))
            plain, seen = min(medians[False]), min(medians[True])
            rows.append({"ops": n, "head_start": head, "plain_us": round(plain, 2), "observed_us": round(seen, 2),
                         "added_us": round(seen - plain, 2), "added_per_op_us": round((seen - plain) / n, 3)})
    return rows


def step_timing_fidelity(state: dict[str, Any], deadline: float) -> dict[str, Any]:
    import torch
    import triton.testing
    from agentforge.evaluator import timing
    from agentforge.evaluator.result import TimingConfig

    scope: dict[str, Any] = {}
    exec(compile(FIDELITY_KERNELS, "fidelity_kernels", "exec"), scope)
    kernels: dict[str, Callable[[], Any]] = scope["KERNELS"]
    device = torch.device("cuda", 0)
    config = TimingConfig(warmup=5, min_reps=30, max_reps=200, target_rel_stderr=0.005, time_cap_s=2.0,
                          flush_l2=True, fresh_inputs=False, recheck_fraction=0.0)
    rows: dict[str, dict[str, Any]] = {}
    for name, fn in kernels.items():
        medians = {}
        for head in (config.head_start, not config.head_start):  # as configured, then the other way
            subject = timing.Subject(name, lambda *_, fn=fn: fn())
            run = timing.run_interleaved([subject], [], lambda rep: None, device,
                                         dataclasses.replace(config, head_start=head), None)
            medians[head] = statistics.median(run.subjects[name].samples_us)
        clocks = sm_clocks()  # right after the timed runs: the clock they ran at, near enough
        evaluator_us = medians[config.head_start]
        do_bench_us = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        rows[name] = {"evaluator_us": round(evaluator_us, 3), "do_bench_us": round(do_bench_us, 3),
                      "evaluator_head_start_us": round(medians[True], 3),
                      "evaluator_no_head_start_us": round(medians[False], 3), **(clocks or {"sm_mhz": None})}
        print(f"{name}: evaluator {evaluator_us:.2f} us (head start {medians[True]:.2f}, none "
              f"{medians[False]:.2f}), do_bench {do_bench_us:.2f} us, SM clock {rows[name]['sm_mhz']} MHz", flush=True)
    observer = observer_cost(device)
    for row in observer:
        print(f"observer: {row}", flush=True)
    ok, problems = True, []
    for name, row in rows.items():
        if time.monotonic() + 30 > deadline - MARGIN_S:
            ok = False
            problems.append(f"{name}: no time left in this call for its ncu run")
            continue
        ref, why = ncu_median_us(name, deadline)
        if ref is None:
            ok = False
            problems.append(f"{name}: {why[:300]}")
            continue
        row["ncu_us"] = round(ref, 3)
        row["evaluator_vs_ncu"] = round(row["evaluator_us"] / ref - 1, 4)
        row["do_bench_vs_ncu"] = round(row["do_bench_us"] / ref - 1, 4)
        row["within_bar"] = ref <= BAR_ABOVE_US or abs(row["evaluator_vs_ncu"]) <= BAR
        ok = ok and row["within_bar"]
        print(f"{name}: ncu {ref:.2f} us; evaluator {row['evaluator_vs_ncu']:+.1%}, "
              f"do_bench {row['do_bench_vs_ncu']:+.1%}", flush=True)
    return {"ok": ok, "kernels": rows, "ncu": "; ".join(problems) or "ok", "observer": observer,
            "head_start": config.head_start,
            "bar": f"evaluator (head start {'on' if config.head_start else 'off'}, the default) within {BAR:.0%} "
                   f"of ncu for kernels over {BAR_ABOVE_US:g} us"}


# ----- 4 and 5. the sandbox with a GPU ---------------------------------------------------------
def reference_slug() -> str:
    """This GPU's folder of reference kernels; Hopper cards without their own use h100's (sm_90a)."""
    import torch

    from agentforge.kernel_library import gpu_slug, select_kernels

    slug = gpu_slug(torch.cuda.get_device_name(0))
    if not select_kernels(slug, None) and torch.cuda.get_device_capability(0)[0] == 9:
        return "h100"
    return slug


def _small_cuda_kernel() -> Any:
    from agentforge.kernel_library import select_kernels

    cuda = [k for k in select_kernels(reference_slug(), None) if k.backend == "cuda"]
    preferred = [k for k in cuda if "relu" in k.task_name or "softmax" in k.task_name]
    return (preferred or cuda)[0]


def evaluation_row(kernel_name: str, shape: str, result: Any, seconds: float, profile: bool = False) -> dict[str, Any]:
    """What one sandboxed evaluation leaves in the report: enough to tell why it was not accepted
    without another GPU call (each flag's rule and evidence, where the time went, the shape)."""
    row: dict[str, Any] = {"kernel": kernel_name, "shape": shape, "status": str(result.status.value),
                           "accepted": result.accepted, "sandbox": result.provenance.sandbox,
                           "seconds": round(seconds, 1), "speedup": result.speedup,
                           "stage_seconds": {k: round(v, 2) for k, v in result.provenance.stage_seconds.items()},
                           "flags": [{"rule": f.rule, "severity": f.severity, "evidence": f.evidence[:400]}
                                     for f in result.flags]}
    if result.error is not None:
        row["error"] = f"{result.error.type}: {result.error.message[:600]}"
    if profile and result.profile is not None:
        row["profile_available"] = result.profile.available
        row["profile_reason"] = result.profile.reason[:600]
        row["profile_kernels"] = len(result.profile.kernels)
        row["profile_metrics"] = sorted(result.profile.totals)[:40]
    return row


def _one_evaluation(kernel: Any, isolation: str, deadline: float, profile: bool = False) -> dict[str, Any]:
    """One sandboxed evaluation on the task's smallest shape: it proves the sandbox and the
    profiler, not the kernel's speed (the 1 GB default shape of a reference task spent 166 s in
    correctness alone on an H200)."""
    from agentforge.evaluator.result import Measure, TimingConfig

    from agentforge.candidate import Candidate
    from agentforge.evaluation import evaluate, make_job
    from agentforge.kernel_library import kernel_task

    task = kernel_task(kernel)
    shape = task.smallest_shape()
    job = make_job(task, Candidate(kernel.source, backend=kernel.backend), device="cuda", shapes=(shape,),
                   measure=Measure(baselines=("eager",), profile=profile),
                   timing=TimingConfig(warmup=2, min_reps=10, max_reps=30, time_cap_s=1.0))
    started = time.monotonic()
    result = evaluate(job, sandbox_config(isolation, timeout_s=left(deadline, 400.0)))
    return evaluation_row(f"{kernel.gpu}/{kernel.task_name}", shape, result, time.monotonic() - started, profile)


def step_isolation(state: dict[str, Any], deadline: float) -> dict[str, Any]:
    from agentforge.sandbox import isolation

    kernel = _small_cuda_kernel()
    modes: dict[str, Any] = {}
    for mode in ("bwrap", "unshare", "none"):
        why = isolation.probe(mode)
        if why:
            modes[mode] = {"skipped": why}
            continue
        if time.monotonic() + 60 > deadline - MARGIN_S:
            modes[mode] = {"skipped": "no time left in this call"}
            continue
        modes[mode] = _one_evaluation(kernel, mode, deadline)
        print(f"isolation {mode}: {modes[mode]}", flush=True)
    ran = [m for m in modes.values() if "skipped" not in m]
    isolating = [name for name, m in modes.items() if name != "none" and "skipped" not in m]
    return {"ok": bool(isolating) and all(m["accepted"] for m in ran), "modes": modes,
            **({} if isolating else {"note": "no isolating mode (bwrap, unshare) ran"})}


def step_profile(state: dict[str, Any], deadline: float) -> dict[str, Any]:
    row = _one_evaluation(_small_cuda_kernel(), "auto", deadline, profile=True)
    print(f"profile: {row}", flush=True)
    return {"ok": bool(row.get("profile_available")), **row}


# ----- 6. every reference kernel --------------------------------------------------------------
def _drop_to_sandbox_user() -> None:
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(SANDBOX_UID)
        os.setuid(SANDBOX_UID)


def _prebuild_one(source: str, name: str, cache: str) -> tuple[str, bool, float, str]:
    """Build one CUDA reference kernel into the sandbox's cache, as the sandbox user (so the child
    finds it under its own uid's build tree)."""
    from agentforge.evaluator import build_cache
    from agentforge.evaluator.worker.loading import load_candidate

    started = time.monotonic()
    build_cache.set_cache_root(cache)
    try:
        loaded = load_candidate(source, "cuda", False, "sm_90a", "agentforge_prebuild")
        error = "" if loaded.error is None else f"{loaded.error.type}: {loaded.error.message[:300]}"
    except Exception as exc:  # reported, and the sandboxed evaluation builds it again
        error = f"{type(exc).__name__}: {exc}"[:300]
    return name, not error, round(time.monotonic() - started, 1), error


def prebuild(kernels: list[Any], workers: int) -> dict[str, Any]:
    """CUDA builds in parallel before the (serial, GPU-exclusive) evaluations."""
    from concurrent.futures import ProcessPoolExecutor

    from agentforge.sandbox.isolation import blocking_ancestor
    from agentforge.sandbox.process_backend import prepare_cache

    if os.geteuid() == 0:  # the builds run as the sandbox user: it must reach the interpreter and the project
        needed = (sys.prefix, sys.base_prefix, str(REPO))
        blocked = [b for b in {blocking_ancestor(p, SANDBOX_UID) for p in needed} if b]
        if blocked:
            return {"kernels": 0, "seconds": 0.0, "failed": {}, "skipped":
                    f"uid {SANDBOX_UID} cannot traverse {', '.join(sorted(blocked))} to this interpreter or the "
                    "project: each sandboxed evaluation builds its own kernel (the sandbox binds those paths in)"}
    cache = WORK / "cache"
    prepare_cache(str(cache), SANDBOX_UID if os.geteuid() == 0 else None)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache / "torch_extensions"))
    os.environ.setdefault("MAX_JOBS", "2")
    jobs = [k for k in kernels if k.backend == "cuda"]
    started = time.monotonic()
    results = []
    import multiprocessing

    # spawned, not forked: this process has initialised CUDA, and the builds ask torch for the arch
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_drop_to_sandbox_user) as pool:
        futures = [pool.submit(_prebuild_one, k.source, f"{k.gpu}/{k.task_name}", str(cache)) for k in jobs]
        results = [f.result() for f in futures]
    failed = {name: error for name, ok, _, error in results if not ok}
    return {"kernels": len(jobs), "seconds": round(time.monotonic() - started, 1), "failed": failed}


COMPILE_SAMPLE = 3  # reference kernels also timed against torch.compile (default mode)
REF_EAGER_S = 12  # one kernel, eager baseline: a fresh sandbox, torch and CUDA start, a Triton JIT or a cached build
REF_COMPILE_S = 90  # one kernel with a cold torch.compile baseline as well
REF_PREBUILD_S = 150  # the CUDA reference kernels built in parallel (8 workers) on a fresh machine


def compile_sample(kernels: list[Any], size: int = COMPILE_SAMPLE) -> list[str]:
    """The kernels (`gpu/task`) timed against torch.compile too: spread over the sorted list, CUDA and
    Triton both where there are both."""
    keys = sorted(f"{k.gpu}/{k.task_name}" for k in kernels)
    backend = {f"{k.gpu}/{k.task_name}": k.backend for k in kernels}
    if not keys:
        return []
    picked = [keys[round(i * (len(keys) - 1) / max(1, size - 1))] for i in range(min(size, len(keys)))]
    for wanted in ("cuda", "triton"):
        if wanted in backend.values() and not any(backend[k] == wanted for k in picked):
            picked[-1] = next(k for k in keys if backend[k] == wanted)
    return sorted(set(picked))


def reference_estimate_s(n_kernels: int) -> int:
    return REF_PREBUILD_S + n_kernels * REF_EAGER_S + COMPILE_SAMPLE * (REF_COMPILE_S - REF_EAGER_S)


def step_reference(state: dict[str, Any], deadline: float) -> dict[str, Any]:
    from agentforge.evaluator.result import TimingConfig

    from agentforge.kernel_library import MeasureOptions, evaluate_kernel, kernel_task, select_kernels

    kernels = select_kernels(reference_slug(), None)
    done: dict[str, Any] = state.setdefault("reference_kernels", {})
    marker = WORK / "cache" / ".prebuilt"
    marker.parent.mkdir(parents=True, exist_ok=True)
    if not marker.exists() and time.monotonic() + 240 < deadline:  # a fresh machine: its cache is empty
        todo = [k for k in kernels if f"{k.gpu}/{k.task_name}" not in done]
        try:
            record = prebuild(todo, workers=max(1, min(8, (os.cpu_count() or 2) // 2)))
        except Exception as exc:  # a failed prebuild costs time, not the measurements: each builds its own
            record = {"kernels": len(todo), "error": f"{type(exc).__name__}: {exc}"[:600]}
        state.setdefault("prebuild", []).append(record)
        marker.write_text("ok\n")
        print(f"prebuild: {state['prebuild'][-1]}", flush=True)
        save_state(state)
    timing_config = TimingConfig(warmup=2, min_reps=5, max_reps=30, time_cap_s=1.0)
    sample = set(compile_sample(kernels))
    for kernel in kernels:
        key = f"{kernel.gpu}/{kernel.task_name}"
        if key in done:
            continue
        with_compile = key in sample
        if time.monotonic() + (REF_COMPILE_S if with_compile else REF_EAGER_S) > deadline - MARGIN_S:
            return {"ok": False, "pending": True, "measured": len(done), "of": len(kernels)}
        # eager for every kernel; torch.compile (cold in each fresh sandbox, 40-90 s) on the sample only
        options = MeasureOptions(device="cuda", baselines=("eager", "compile") if with_compile else ("eager",),
                                 compile_modes=("default",), shapes=("default",), timing=timing_config)
        started = time.monotonic()
        try:
            results = evaluate_kernel(kernel, kernel_task(kernel), options,
                                      sandbox_config("auto", timeout_s=left(deadline, 300.0)))
        except Exception as exc:  # one kernel's failure is its row; the others are still measured
            done[key] = {"backend": kernel.backend, "status": "error", "accepted": False, "speedup_vs_eager": None,
                         "speedup_vs_compile": None, "candidate_us": None, "eager_us": None,
                         "seconds": round(time.monotonic() - started, 1), "error": f"{type(exc).__name__}: {exc}"[:300]}
            save_state(state)
            continue
        if not results:
            done[key] = {"backend": kernel.backend, "status": "skipped", "accepted": False, "speedup_vs_eager": None,
                         "speedup_vs_compile": None, "candidate_us": None, "eager_us": None, "seconds": 0.0,
                         "error": "the default shape was skipped"}
            continue
        result = next(iter(results.values()))
        timing_record = result.timing
        done[key] = {
            "backend": kernel.backend, "status": str(result.status.value), "accepted": result.accepted,
            "speedup_vs_eager": result.speedup, "speedup_vs_compile": result.speedup_vs_compile,
            "candidate_us": timing_record.candidate.median_us if timing_record else None,
            "eager_us": (timing_record.baselines["eager"].median_us
                         if timing_record and "eager" in timing_record.baselines else None),
            "seconds": round(time.monotonic() - started, 1),
            "error": "" if result.error is None else f"{result.error.type}: {result.error.message[:300]}",
        }
        print(f"{key}: {done[key]}", flush=True)
        save_state(state)
    accepted = sum(1 for r in done.values() if r["accepted"])
    return {"ok": accepted == len(kernels), "measured": len(done), "of": len(kernels), "accepted": accepted,
            "compile_sample": sorted(sample)}


# In the order that proves most in a first call of 540 s (about 9 minutes: doctor, fidelity,
# isolation, profile and the gpu tests), the reference kernels left for the calls after it. Estimates
# for an H100 with a cold build cache, from what each step runs; no GPU has run them yet.
FIRST_CALL_S = 540
RESUMABLE = ("gpu_tests", "reference")  # they keep what finished and go on in the next call
RESUMABLE_START_S = 60.0  # such a step starts when at least this much of the call is left
STEPS = (
    Step("doctor", 15, "every GPU-path prerequisite: ok or what to do (ncu's metric list included)", step_doctor),
    Step("timing_fidelity", 150, "evaluator (head start on and off) vs do_bench vs ncu gpu__time_duration, 6 kernels "
         "2 us..2 ms, SM clock per row; the operator observer's cost", step_timing_fidelity),
    Step("isolation", 100, "one CUDA reference kernel sandboxed under bwrap, unshare and none (one cold build)",
         step_isolation),
    Step("profile", 60, "a sandboxed evaluation with the Nsight Compute profile", step_profile),
    Step("gpu_tests", 180, "pytest -m gpu on the files with gpu tests, with gpu-check's warm build cache "
         "(what it has time for; the rest next call)", step_gpu_tests),
    Step("reference", reference_estimate_s(70), f"every reference kernel, default shape, eager baseline; "
         f"torch.compile default on {COMPILE_SAMPLE} of them (CUDA builds in parallel first); resumes kernel by kernel",
         step_reference),
)


# ----- state and reports ----------------------------------------------------------------------
_STATE_PATH: list[Path] = []
_OUT: list[Path] = []  # --out: the state is copied there at every save, so a killed call keeps it


def save_state(state: dict[str, Any]) -> None:
    path = _STATE_PATH[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, default=str))
    tmp.replace(path)
    for out in _OUT:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, out / path.name)


def render_markdown(state: dict[str, Any]) -> str:
    ident = state.get("identity", {})
    lines = [f"# gpu-check on {ident.get('gpu', '?')}", "",
             f"GPU {ident.get('gpu')} (compute capability {ident.get('capability')}), driver {ident.get('driver')} "
             f"(CUDA {ident.get('driver_cuda')}), torch {ident.get('torch')} (CUDA {ident.get('torch_cuda')}), "
             f"Python {ident.get('python')}; last call {ident.get('date')}. Written by `scripts/gpu_check.py`.", "",
             "| step | result | detail |", "|---|---|---|"]
    for step in STEPS:
        result = state.get("steps", {}).get(step.name)
        if result is None:
            lines.append(f"| {step.name} | pending | {step.what} |")
            continue
        verdict = "ok" if result.get("ok") else ("pending" if result.get("pending") else "FAILED")
        lines.append(f"| {step.name} | {verdict} | {_detail(step.name, result)} |")
    fidelity_step = state.get("steps", {}).get("timing_fidelity", {})
    fidelity = fidelity_step.get("kernels", {})
    if fidelity:
        lines += ["", "## Timing fidelity (median us)", "",
                  "| kernel | evaluator | head start on | head start off | do_bench | ncu | evaluator vs ncu | "
                  "do_bench vs ncu | SM MHz |", "|---|---|---|---|---|---|---|---|---|"]
        for name, row in fidelity.items():
            lines.append(f"| {name} | {row['evaluator_us']} | {row.get('evaluator_head_start_us', '—')} | "
                         f"{row.get('evaluator_no_head_start_us', '—')} | {row['do_bench_us']} | "
                         f"{row.get('ncu_us', '—')} | {_pct(row.get('evaluator_vs_ncu'))} | "
                         f"{_pct(row.get('do_bench_vs_ncu'))} | {row.get('sm_mhz') or '—'} |")
    observer = fidelity_step.get("observer", [])
    if observer:
        lines += ["", "## The operator observer's cost in a timed call (median us, best of two)", "",
                  "| ops | head start | plain | observed | added | per op |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['ops']} | {r['head_start']} | {r['plain_us']} | {r['observed_us']} | {r['added_us']} | "
                  f"{r['added_per_op_us']} |" for r in observer]
    kernels = state.get("reference_kernels", {})
    if kernels:
        lines += ["", "## Reference kernels (default shape)", "",
                  "| kernel | status | accepted | us | vs eager | vs compile |", "|---|---|---|---|---|---|"]
        for name, row in sorted(kernels.items()):
            lines.append(f"| {name} | {row['status']} | {row['accepted']} | {_num(row['candidate_us'])} | "
                         f"{_x(row['speedup_vs_eager'])} | {_x(row['speedup_vs_compile'])} |")
    return "\n".join(lines) + "\n"


def _detail(name: str, result: dict[str, Any]) -> str:
    if name == "doctor":
        return "; ".join(f"{c['name']}: {c['status']}" for c in result.get("checks", []) if c["status"] != "ok")
    if name == "gpu_tests":
        return result.get("summary", "")
    if name == "timing_fidelity":
        return f"{result.get('bar')}; ncu: {result.get('ncu')}"
    if "error" in result and name != "reference":
        return f"error: {str(result['error'])[:200]}"
    if name == "isolation":
        return "; ".join(f"{m}: {r.get('status', r.get('skipped', ''))[:80]}{_rules(r)}"
                         for m, r in result.get("modes", {}).items())
    if name == "profile":
        return f"available={result.get('profile_available')} {result.get('profile_reason', '')[:200]}"
    if name == "reference":
        return (f"{result.get('accepted', 0)} accepted of {result.get('measured')} measured ({result.get('of')} in "
                f"all); torch.compile on {', '.join(result.get('compile_sample', [])) or 'none yet'}")
    return ""


def _rules(row: dict[str, Any]) -> str:
    rules = [f["rule"] for f in row.get("flags", [])]
    return f" (flags: {', '.join(rules)})" if rules else ""


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def plan_calls(budget_s: float = FIRST_CALL_S) -> list[list[str]]:
    """The steps each call of `budget_s` would run, by the estimates (a resumable step may span calls)."""
    calls: list[list[str]] = [[]]
    used = 0.0
    for step in STEPS:
        cost = float(step.estimate_s)
        while cost > 0:
            room = budget_s - MARGIN_S - used
            needed = RESUMABLE_START_S if step.name in RESUMABLE else cost
            if room < needed and used > 0:  # a step longer than a whole call still gets one of its own
                calls.append([])
                used = 0.0
                continue
            if step.name not in calls[-1]:
                calls[-1].append(step.name)
            spent = min(cost, room) if step.name in RESUMABLE else cost
            used += spent
            cost -= spent
    return calls


def print_plan() -> None:
    total = sum(s.estimate_s for s in STEPS)
    print("gpu-check: no CUDA GPU visible, nothing measured. On a GPU machine it runs, in order:")
    for step in STEPS:
        print(f"  {step.name:<16} ~{step.estimate_s // 60} min {step.estimate_s % 60:02d} s  {step.what}")
    print(f"  total about {total // 60} min {total % 60:02d} s with a cold build cache (estimates: no GPU has run "
          f"it yet), in calls of at most --budget-s ({FIRST_CALL_S} s by default); each call skips the steps "
          "that are done (results/gpu/<gpu>/state.json, copied to --out)")
    for number, names in enumerate(plan_calls(), 1):
        print(f"  call {number}: {', '.join(names)}")
    print("  writes results/gpu/<gpu>/gpu_check.json and gpu_check.md (GPU, driver, torch, date)")


def cpu_only_refusal(torch: Any, nvidia_smi: str | None = None) -> str | None:
    """Why this interpreter must not print the plan and exit 0 on a GPU machine: nvidia-smi sees a
    GPU that its torch cannot use (a carried CPU-only .venv, say). None where nvidia-smi sees none."""
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip().startswith("GPU ")]
    if proc.returncode != 0 or not gpus:
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return (f"gpu-check: nvidia-smi sees {gpus[0]} but {sys.executable}'s torch {torch.__version__} ({build}) "
            "cannot use it: nothing measured. Run it with an interpreter whose torch has CUDA: "
            "`make gpu-check GPU_CHECK_PY=python3` (a GPU image's python3), or install torch's CUDA build")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget-s", type=float, default=540.0, help="start no step that would end after this")
    parser.add_argument("--out", default=None, help="also copy the state and reports into this folder")
    parser.add_argument("--only", default="", help="comma-separated steps to run (default: all not done)")
    parser.add_argument("--plan", action="store_true", help="print the plan and exit")
    args = parser.parse_args(argv)
    # The budget counts from the first process's start: torch's import and the re-exec included.
    started = float(os.environ.pop(_STARTED, None) or time.monotonic())
    _STARTED_AT[:] = [started]
    try:
        import torch
    except ImportError as exc:
        print(f"gpu-check: {sys.executable} cannot import torch ({exc}): run it with the GPU image's python3, "
              "whose torch has CUDA (make gpu-check GPU_CHECK_PY=python3)", file=sys.stderr)
        return 2
    if args.plan:
        print_plan()
        return 0
    if not torch.cuda.is_available():
        refusal = cpu_only_refusal(torch)
        if refusal:
            print(refusal, file=sys.stderr, flush=True)
            return 2
        print_plan()
        return 0
    deadline = started + args.budget_s
    ensure_importable()
    identity = gpu_identity()
    folder = REPO / "results" / "gpu" / identity["slug"]
    _STATE_PATH[:] = [folder / "state.json"]
    _OUT[:] = [Path(args.out)] if args.out else []
    state = json.loads(_STATE_PATH[0].read_text()) if _STATE_PATH[0].is_file() else {}
    state["identity"] = identity
    try:
        run_steps(state, args.only, deadline)
    finally:  # a step that raised past its own handler, or Ctrl-C: what finished is still reported
        write_reports(state, folder, args.out)
    steps = state["steps"]
    failed = [s.name for s in STEPS if s.name in steps and not steps[s.name].get("ok")
              and not steps[s.name].get("pending")]
    pending = [s.name for s in STEPS if s.name not in steps or steps[s.name].get("pending")]
    print(f"gpu-check: {len(STEPS) - len(pending) - len(failed)} ok, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + f", {len(pending)} pending"
          + (f" ({', '.join(pending)}: run again)" if pending else ""), flush=True)
    return 1 if failed else 0


def run_steps(state: dict[str, Any], only: str, deadline: float) -> None:
    steps = state.setdefault("steps", {})
    wanted = [s for s in only.split(",") if s]
    for step in STEPS:
        if wanted and step.name not in wanted:
            continue
        if not wanted and step.name in steps and not steps[step.name].get("pending"):
            continue
        needed = RESUMABLE_START_S if step.name in RESUMABLE else step.estimate_s
        if time.monotonic() + needed > deadline - MARGIN_S:
            print(f"gpu-check: {step.name} (~{step.estimate_s} s) would not finish in this call: run again", flush=True)
            break
        print(f"== {step.name}: {step.what}", flush=True)
        begun = time.monotonic()
        try:
            result = step.run(state, deadline)
        except Exception as exc:  # one broken step is a result, the others still run
            import traceback

            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        result["seconds"] = round(time.monotonic() - begun, 1)
        steps[step.name] = result
        save_state(state)
        if result.get("pending"):
            print("gpu-check: out of this call's budget: run again to go on", flush=True)
            break


def write_reports(state: dict[str, Any], folder: Path, out: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpu_check.json").write_text(json.dumps(state, indent=2, default=str))
    (folder / "gpu_check.md").write_text(render_markdown(state))
    save_state(state)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for name in ("state.json", "gpu_check.json", "gpu_check.md"):
            shutil.copy2(folder / name, Path(out) / name)
        if (WORK / "gpu_tests.log").is_file():  # the gpu tests' whole -v output, for their failures
            shutil.copy2(WORK / "gpu_tests.log", Path(out) / "gpu_tests.log")
    print(f"gpu-check: wrote {folder / 'gpu_check.md'} and gpu_check.json", flush=True)


if __name__ == "__main__":
    sys.exit(main())
