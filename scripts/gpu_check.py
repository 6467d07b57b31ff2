"""`make gpu-check`: prove the GPU path on the first GPU at hand, in calls of at most 10 minutes.

    python3 scripts/gpu_check.py [--budget-s 540] [--out DIR] [--only STEP,...] [--plan]

Steps, in order (estimates for one H100 with a cold build cache):

1. doctor           every prerequisite, ok or what to do (`agentforge.evaluator.hardware.doctor`)
2. timing_fidelity  the evaluator's median vs Triton's do_bench vs ncu's gpu__time_duration on
                    6 kernels from ~2 us to ~2 ms; within 5 % above 20 us is the bar
3. isolation        one CUDA reference kernel through the real sandbox in each isolation mode
4. profile          a sandboxed evaluation with the Nsight Compute profile on
5. gpu_tests        the `gpu`-marked tests (pytest -m gpu on the files that have them), 300 s at most
6. reference        every reference kernel of this GPU on its default shape: CUDA builds first, in
                    parallel, then each kernel timed against eager and torch.compile (default)

Resumable: each finished step (and each measured reference kernel) is kept in
`results/gpu/<gpu>/state.json`; a step that would not finish inside `--budget-s` (counted from the
script's start, 20 s kept for the reports) is left for the next call, which skips what is done, and
every run inside a step is bounded by what is left. The device machine starts bare each time, so
bring the files back: `--out DIR` gets the state at every save and the reports at the end, also
when a step raised (`make gpu-check OUT=$OUT`); copying them into `results/gpu/<gpu>/` here makes
the next call go on where this one stopped.
Writes `results/gpu/<gpu>/gpu_check.json` and `gpu_check.md` (GPU, driver, torch, date, per step).

Without a GPU it prints this plan with its time estimates and exits 0. Imports only the standard
library, torch, numpy, triton and the project (whose evaluator and sandbox need nothing else).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
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
    from agentforge.evaluator.hardware.doctor import driver_cuda_version, gather

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

    from agentforge.evaluator.hardware import doctor

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


def _text(part: str | bytes | None) -> str:
    """A TimeoutExpired's captured output: bytes even when the run asked for text."""
    if isinstance(part, bytes):
        return part.decode(errors="replace")
    return part or ""


def step_gpu_tests(state: dict[str, Any], deadline: float) -> dict[str, Any]:
    files = gpu_test_files()
    limit = left(deadline, GPU_TESTS_CAP_S)
    report = WORK / "gpu_tests.xml"
    report.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rfEs",
            f"--junitxml={report}", *files]
    try:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=limit)
        out, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = "".join(_text(part) for part in (exc.stdout, exc.stderr))
        out, code = f"{out}\nstopped after {limit:.0f} s", -1
        if limit < GPU_TESTS_CAP_S:  # this call's budget ended it, not the tests' own cap: run again
            return {"ok": False, "pending": True, "files": files, "summary": f"stopped after {limit:.0f} s",
                    "tail": out[-3000:]}
    print(out[-4000:], flush=True)
    summary = next((ln for ln in reversed(out.splitlines()) if " passed" in ln or " failed" in ln
                    or " error" in ln), "")
    failures = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return {"ok": code == 0, "exit_code": code, "files": files, "summary": summary.strip("= "),
            "failures": failures[:40], "tail": out[-3000:]}


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
        evaluator_us = medians[config.head_start]
        do_bench_us = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        rows[name] = {"evaluator_us": round(evaluator_us, 3), "do_bench_us": round(do_bench_us, 3),
                      "evaluator_head_start_us": round(medians[True], 3),
                      "evaluator_no_head_start_us": round(medians[False], 3)}
        print(f"{name}: evaluator {evaluator_us:.2f} us (head start {medians[True]:.2f}, none "
              f"{medians[False]:.2f}), do_bench {do_bench_us:.2f} us", flush=True)
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
    return {"ok": ok, "kernels": rows, "ncu": "; ".join(problems) or "ok",
            "bar": f"evaluator within {BAR:.0%} of ncu for kernels over {BAR_ABOVE_US:g} us"}


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


def _one_evaluation(kernel: Any, isolation: str, deadline: float, profile: bool = False) -> dict[str, Any]:
    from agentforge.evaluator.api import evaluate, make_job
    from agentforge.evaluator.result import Measure, TimingConfig

    from agentforge.candidate import Candidate
    from agentforge.kernel_library import kernel_task

    task = kernel_task(kernel)
    job = make_job(task, Candidate(kernel.source, backend=kernel.backend), device="cuda", shapes=("default",),
                   measure=Measure(baselines=("eager",), profile=profile),
                   timing=TimingConfig(warmup=2, min_reps=10, max_reps=30, time_cap_s=1.0))
    started = time.monotonic()
    result = evaluate(job, sandbox_config(isolation, timeout_s=left(deadline, 400.0)))
    row: dict[str, Any] = {"kernel": f"{kernel.gpu}/{kernel.task_name}", "status": str(result.status.value),
                           "accepted": result.accepted, "sandbox": result.provenance.sandbox,
                           "seconds": round(time.monotonic() - started, 1), "speedup": result.speedup}
    if result.error is not None:
        row["error"] = f"{result.error.type}: {result.error.message[:600]}"
    if profile and result.profile is not None:
        row["profile_available"] = result.profile.available
        row["profile_reason"] = result.profile.reason[:600]
        row["profile_kernels"] = len(result.profile.kernels)
        row["profile_metrics"] = sorted(result.profile.totals)[:40]
    return row


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
    from agentforge.evaluator.loading import load_candidate

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
    options = MeasureOptions(device="cuda", baselines=("eager", "compile"), compile_modes=("default",),
                             shapes=("default",),
                             timing=TimingConfig(warmup=2, min_reps=5, max_reps=30, time_cap_s=1.0))
    for kernel in kernels:
        key = f"{kernel.gpu}/{kernel.task_name}"
        if key in done:
            continue
        if time.monotonic() + 60 > deadline - MARGIN_S:
            return {"ok": False, "pending": True, "measured": len(done), "of": len(kernels)}
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
    return {"ok": accepted == len(kernels), "measured": len(done), "of": len(kernels), "accepted": accepted}


# In the order that proves most in a first call of 540 s: the evaluator's timing against ncu, the
# main user path (a sandboxed CUDA evaluation) in each isolation mode and with its profile, then
# the gpu tests (capped at GPU_TESTS_CAP_S), then the reference kernels, resumable across calls.
STEPS = (
    Step("doctor", 10, "every GPU-path prerequisite: ok or what to do", step_doctor),
    Step("timing_fidelity", 120, "evaluator median vs do_bench vs ncu gpu__time_duration, 6 kernels "
         "2 us..2 ms", step_timing_fidelity),
    Step("isolation", 120, "one CUDA reference kernel sandboxed under bwrap, unshare and none", step_isolation),
    Step("profile", 75, "a sandboxed evaluation with the Nsight Compute profile", step_profile),
    Step("gpu_tests", 200, "pytest -m gpu on the files with gpu tests (at most 300 s)", step_gpu_tests),
    Step("reference", 360, "every reference kernel, default shape, eager + torch.compile default "
         "(CUDA builds in parallel first); resumes kernel by kernel", step_reference),
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
    fidelity = state.get("steps", {}).get("timing_fidelity", {}).get("kernels", {})
    if fidelity:
        lines += ["", "## Timing fidelity (median us)", "",
                  "| kernel | evaluator | with head start | do_bench | ncu | evaluator vs ncu | do_bench vs ncu |",
                  "|---|---|---|---|---|---|---|"]
        for name, row in fidelity.items():
            lines.append(f"| {name} | {row['evaluator_us']} | {row.get('evaluator_head_start_us', '—')} | "
                         f"{row['do_bench_us']} | {row.get('ncu_us', '—')} | "
                         f"{_pct(row.get('evaluator_vs_ncu'))} | {_pct(row.get('do_bench_vs_ncu'))} |")
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
        return "; ".join(f"{m}: {r.get('status', r.get('skipped', ''))[:80]}"
                         for m, r in result.get("modes", {}).items())
    if name == "profile":
        return f"available={result.get('profile_available')} {result.get('profile_reason', '')[:200]}"
    if name == "reference":
        return f"{result.get('accepted', 0)} accepted of {result.get('measured')} measured ({result.get('of')} in all)"
    return ""


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def print_plan() -> None:
    total = sum(s.estimate_s for s in STEPS)
    print("gpu-check: no CUDA GPU visible, nothing measured. On a GPU machine it runs, in order:")
    for step in STEPS:
        print(f"  {step.name:<16} ~{step.estimate_s // 60} min {step.estimate_s % 60:02d} s  {step.what}")
    print(f"  total about {total // 60} min {total % 60:02d} s with a cold build cache (estimates: no GPU has run "
          "it yet), in calls of at most "
          "--budget-s (540 s by default); each call skips the steps that are done "
          "(results/gpu/<gpu>/state.json, copied to --out)")
    print("  writes results/gpu/<gpu>/gpu_check.json and gpu_check.md (GPU, driver, torch, date)")


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
    import torch

    if args.plan or not torch.cuda.is_available():
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
    return 0


def run_steps(state: dict[str, Any], only: str, deadline: float) -> None:
    steps = state.setdefault("steps", {})
    wanted = [s for s in only.split(",") if s]
    for step in STEPS:
        if wanted and step.name not in wanted:
            continue
        if not wanted and step.name in steps and not steps[step.name].get("pending"):
            continue
        if step.name != "reference" and time.monotonic() + step.estimate_s > deadline - MARGIN_S:
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
    print(f"gpu-check: wrote {folder / 'gpu_check.md'} and gpu_check.json", flush=True)


if __name__ == "__main__":
    sys.exit(main())
