"""Published KernelBench CUDA answers, judged by the compile-only verdict and by torch's own build.

The corpus is read from public repositories at a fixed commit (their code is never copied here):
the answers a field's RL system published for its kernels (`deepreinforce-ai/CUDA-L1`, the H100
file: one answer per KernelBench task, with the task's reference code beside it). Most of them
build their `load_inline` extension in `__init__` or `forward`, behind `torch.cuda.is_available()`
or `x.is_cuda`, and many catch a failed build and fall back to PyTorch.

For each answer (levels 1-2 by default, those passing CUDA sources to `load_inline`):

* **ours**: the compile-only verdict, `run_pipeline` as the sandbox child runs it (the judge here,
  the candidate in its own worker process, started beforehand as the sandbox child forks its
  worker before the job arrives), with an empty build cache: status, the wall time of the verdict
  cold, and again with the same source (warm: the build cache's hit).
* **torch**: the same `load_inline` calls (captured by driving the answer under the CUDA
  lookalike with every build answered "built" without compiling, in a child process) given to the
  installed torch's own `cpp_extension.load_inline` on the local toolkit for sm_90a, each in a
  fresh process: torch writes its sources and ninja file with its own flags and compiles both
  objects; on a CPU-only torch its link then fails for want of libtorch_cuda, which is not a
  compile failure. The answer compiles when every call's objects compile.

Agreement: our verdict is `compile_error` exactly where torch's build fails an object, and a
built verdict (`ok`, or `integrity_flag` when only integrity rules fired) where it compiles them
all; an answer that never calls `load_inline` with CUDA sources is `no_cuda_build` on both sides.
Answers this evaluator refuses before compiling (flags that change numerics, `--use_fast_math`)
are listed apart: that is its rule, not a compiler's verdict.

The build cache starts empty but for the precompiled `torch/extension.h` the sandbox's parent
builds once per flag set for `load_inline` candidates (`evaluator/header_prebuild.py`): built at
the start of the run and timed (`--headers CACHE` reuses the trusted tree of an earlier prebuild).
Ours and torch's build alternate per answer, so both see the same load; `--skip-refused` leaves
out torch's build for answers refused by policy (they count in neither agreement nor speed).

    python benchmarks/kernelbench_answers.py --git /path/to/CUDA-L1.git [--limit 40] [--start N] \\
        [--headers CACHE] [--skip-refused] [--no-torch] [--out results/benchmarks/kernelbench_answers-<date>.json]
    python benchmarks/kernelbench_answers.py --merge part1.json part2.json --out all.json

`--git` is a clone (or bare mirror) of https://github.com/deepreinforce-ai/CUDA-L1 holding COMMIT.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ARCH = "sm_90a"


@dataclass(frozen=True)
class Source:
    """Where a corpus comes from: a repository, a commit, a file of JSON lines."""

    repo: str
    commit: str
    path: str


CUDA_L1 = Source("deepreinforce-ai/CUDA-L1", "51e8356bf844101cab2aeeca4bdff47ebb1953b8",
                 "optimized_cuda_code/h100.json")

# torch's own build of one captured call, on the local toolkit: its verbose ninja output.
TORCH_OWN_BUILD = """
import json, os, sys
os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
from torch.utils import cpp_extension
cpp_extension.CUDA_HOME = sys.argv[1]
call = json.loads(sys.stdin.read())
try:
    cpp_extension.load_inline(build_directory=sys.argv[2], verbose=True, **call)
except (RuntimeError, OSError, ImportError) as exc:
    print("build failed:", exc)
"""


def read_corpus(git: Path, source: Source, levels: tuple[str, ...], limit: int) -> list[dict[str, Any]]:
    """The answers of `source` at its commit, read with git (nothing is checked out or copied)."""
    text = subprocess.run(["git", "--git-dir", str(git), "show", f"{source.commit}:{source.path}"], check=True,
                          capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    chosen = [r for r in rows if str(r.get("level_id")) in levels and "load_inline" in (r.get("custom_code") or "")
              and "cuda_sources" in r["custom_code"]]
    chosen.sort(key=lambda r: (int(r["level_id"]), int(r["task_id"])))
    per_level = {level: [r for r in chosen if str(r["level_id"]) == level] for level in levels}
    chosen = [r for group in zip(*per_level.values(), strict=False) for r in group]  # levels alternate
    return [{"level": int(r["level_id"]), "task": int(r["task_id"]), "task_source": r["ref_code"],
             "answer": r["custom_code"], "where": f"{source.repo}@{source.commit[:12]}:{source.path}"
             f" (level {r['level_id']}, task {r['task_id']})"} for r in chosen[:limit]]


# ----- ours ------------------------------------------------------------------------------------------
def our_verdict(answer: dict[str, Any], cache: Path) -> dict[str, Any]:
    from agentforge.evaluator.result import EvalJob

    job = EvalJob(task_name=f"level{answer['level']}/{answer['task']}", task_source=answer["task_source"],
                  candidate_source=answer["answer"], backend="cuda", device="cpu", cuda_arch=ARCH,
                  cache_dir=str(cache))
    result, cold, _ = timed_verdict(job, cache)
    again, warm, warm_cpu = timed_verdict(job, cache)
    compile_record = result.compile
    return {"status": result.status.value, "stage": result.stage.value, "seconds_cold": round(cold, 2),
            "seconds_warm": round(warm, 2), "cpu_seconds_warm": round(warm_cpu, 2), "warm_status": again.status.value,
            "compile_seconds_cold": round(compile_record.seconds, 2) if compile_record else None,
            "compile_seconds_warm": round(again.compile.seconds, 3) if again.compile else None,
            "compiled": bool(compile_record and compile_record.ok),
            "progress": (compile_record.log_tail.splitlines() or [""])[-1][:300] if compile_record else "",
            "error": (result.error.message[:600] if result.error else ""),
            "flags": sorted({f.rule for f in result.flags})}


def timed_verdict(job: Any, cache: Path) -> tuple[Any, float, float]:
    """The verdict, its wall seconds and its CPU seconds (judge and worker, their children
    included), from a worker already started (as the sandbox child forks its worker before the job
    arrives): the judge's task check, the candidate's load and drive, the builds and the decision;
    not the start of a Python process. On a loaded machine the CPU seconds are what the load
    leaves alone."""
    from agentforge.evaluator.judge.pipeline import run_pipeline
    from agentforge.sandbox.worker import launch_worker

    worker = launch_worker()
    worker.setup(workdir=os.getcwd(), cache_dir=str(cache), cpu_threads=1, device="cpu", torch_switches=True)
    cpu = _cpu_seconds(worker.pid) + sum(os.times()[:4])
    started = time.perf_counter()
    result = run_pipeline(job, worker)
    wall = time.perf_counter() - started
    cpu = _cpu_seconds(worker.pid) + sum(os.times()[:4]) - cpu
    worker.close()
    return result, wall, cpu


def _cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of a live process, from /proc (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


# ----- torch's own build ---------------------------------------------------------------------------
def capture_calls(answer: dict[str, Any]) -> dict[str, Any]:
    """The load_inline calls the answer makes under the lookalike (in a child process: candidate
    code never runs in this one)."""
    done = subprocess.run([sys.executable, __file__, "--capture"], input=json.dumps(answer), capture_output=True,
                          text=True, timeout=900, cwd=REPO)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"calls": [], "error": (done.stderr or done.stdout)[-500:]}
    return json.loads(lines[-1])


def capture_main() -> None:
    """Child: drive the answer under the lookalike, every build answered 'built' without compiling."""
    import warnings

    from agentforge.evaluator.judge.compile_verdict import input_specs
    from agentforge.evaluator.worker import compile_only, cuda_lookalike, loading

    from agentforge.task import Task

    warnings.simplefilter("ignore")
    answer = json.loads(sys.stdin.read())
    calls: list[dict[str, Any]] = []

    def record(name: str, cpp: list[str], cuda: list[str], functions: Any, arch: str, extra_cflags: Any = (),
               extra_cuda_cflags: Any = (), extra_ldflags: Any = (), extra_include_paths: Any = (),
               **options: Any) -> compile_only.InlineVerdict:
        calls.append({"name": name, "cpp_sources": list(cpp), "cuda_sources": list(cuda) or None,
                      "functions": functions, "extra_cflags": list(extra_cflags),
                      "extra_cuda_cflags": list(extra_cuda_cflags), "extra_ldflags": list(extra_ldflags),
                      "extra_include_paths": list(extra_include_paths), **options})
        return compile_only.InlineVerdict(True, "", "", None, True)

    compile_only.compile_inline_extension = record
    error = ""
    try:
        task = Task("answer", answer["task_source"])
        loaded = loading.load_candidate(answer["answer"], "cuda", True, ARCH, "agentforge_candidate_capture")
        progress = cuda_lookalike.drive(loaded.model_cls, list(task.init_inputs()), input_specs(task, "default"),
                                        ARCH)
        error = loaded.error.message[:300] if loaded.error else progress["stopped"]
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps({"calls": calls, "error": error}, default=str))


def torch_build(call: dict[str, Any], nvcc_home: str) -> dict[str, Any]:
    """torch's own load_inline of one call: which objects failed to compile, the first error."""
    from agentforge.evaluator.worker import api_drift

    with tempfile.TemporaryDirectory(prefix="torch-own-") as folder:
        started = time.perf_counter()
        output = run_until_failed(TORCH_OWN_BUILD, [nvcc_home, folder], json.dumps(call), Path(folder) / "out.log")
        seconds = time.perf_counter() - started
        objects = ninja_seconds(Path(folder) / ".ninja_log")
    failed = re.findall(r"FAILED: (\S+\.o)", output)
    refused = "build failed" in output and not failed and "-o " not in output  # never reached a compiler
    return {"seconds": round(seconds, 2), "object_seconds": objects, "failed_objects": failed, "refused": refused,
            "first_error": api_drift.first_error(output) if failed or refused else ""}


def run_until_failed(script: str, argv: list[str], stdin: str, log: Path, timeout: float = 1800) -> str:
    """torch's build in a child, its output in `log`; ended at ninja's first `FAILED:` (the verdict
    is known then: ninja would wait for the other compiles, minutes of nvcc, before giving up)."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", script, *argv], stdin=subprocess.PIPE, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            time.sleep(0.2)
            late = time.monotonic() > deadline
            if "FAILED: " in log.read_text(errors="replace") or late:
                time.sleep(0.5)  # the failing command's own output follows its FAILED line
                os.killpg(proc.pid, 9)
                proc.wait()
                with open(log, "a") as out:
                    out.write("\nbuild failed: timeout\n" if late else "")
                break
    return log.read_text(errors="replace")


def ninja_seconds(log: Path) -> dict[str, float]:
    """Seconds per object from ninja's log (start and end in ms, per target): which compile is the long pole."""
    if not log.exists():
        return {}
    rows = [line.split("\t") for line in log.read_text().splitlines() if not line.startswith("#")]
    return {row[3]: round((int(row[1]) - int(row[0])) / 1000, 2) for row in rows if len(row) >= 4}


def torch_verdict(capture: dict[str, Any], nvcc_home: str) -> dict[str, Any]:
    builds = [torch_build(call, nvcc_home) for call in capture["calls"]]
    cuda = any(call.get("cuda_sources") for call in capture["calls"])
    failed = [b for b in builds if b["failed_objects"] or b["refused"]]
    verdict = "compile_error" if failed else ("built" if cuda else "no_cuda_build")
    return {"verdict": verdict, "calls": len(builds), "seconds": round(sum(b["seconds"] for b in builds), 2),
            "first_error": failed[0]["first_error"] if failed else "", "capture_note": capture.get("error", "")}


def refused_by_policy(ours: dict[str, Any]) -> bool:
    return ours["status"] == "compile_error" and ours["error"].startswith("forbidden compiler flags")


def agree(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    built = ours["status"] in ("ok", "integrity_flag") and ours["compiled"]
    return {"built": built, "compile_error": ours["status"] == "compile_error",
            "no_cuda_build": ours["status"] == "no_cuda_build"}[theirs["verdict"]]


# ----- the run -------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "nvcc": nvcc[-1] if nvcc else "", "os": platform.platform()}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    refused = [r for r in rows if refused_by_policy(r["ours"])]
    # Judged: a compiler gave both verdicts (not refused by policy, torch's build not skipped).
    judged = [r for r in rows if not refused_by_policy(r["ours"]) and r["torch"]["verdict"] != "skipped"]
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["ours"]["status"]] = statuses.get(row["ours"]["status"], 0) + 1
    flagged = [r for r in rows if r["ours"]["flags"]]
    built = [r for r in rows if r["torch"]["verdict"] == "built"]
    failed = [r for r in rows if r["torch"]["verdict"] == "compile_error"]
    return {
        "answers": len(rows), "judged_on_the_compiler": len(judged),
        "agree": sum(agree(r["ours"], r["torch"]) for r in judged),
        "disagreements": [r["where"] for r in judged if not agree(r["ours"], r["torch"])],
        # Flags that change numerics (--use_fast_math, ...) are refused before any compiler runs: a
        # rule of this evaluator, not a compiler's verdict, so these are not counted either way.
        "refused_by_policy": [{"where": r["where"], "torch": r["torch"]["verdict"]} for r in refused],
        "our_statuses": statuses,
        "torch_compile_errors": sum(r["torch"]["verdict"] == "compile_error" for r in rows),
        "built_in_init_or_forward": sum(r["built_outside_module_body"] for r in rows),
        "api_drift_named": sum("API drift" in r["ours"]["error"] for r in rows),
        "integrity_flagged": len(flagged),
        "median_verdict_cold_s": median([r["ours"]["seconds_cold"] for r in rows]),
        "median_verdict_warm_s": median([r["ours"]["seconds_warm"] for r in rows]),
        "median_cpu_warm_s": median_of([r["ours"].get("cpu_seconds_warm") for r in rows]),
        "max_verdict_warm_s": max((r["ours"]["seconds_warm"] for r in rows), default=None),
        "median_compile_cold_s": median([r["ours"]["compile_seconds_cold"] or 0.0 for r in rows]),
        "median_compile_warm_s": median([r["ours"]["compile_seconds_warm"] or 0.0 for r in rows]),
        "median_torch_build_s": median([r["torch"]["seconds"] for r in rows if r["torch"]["calls"]]),
        # Item 5's figure: on the answers a compiler judged (both sides compiled), ours against torch's.
        "judged": judged_speed(judged),
        # Where torch's build compiles everything the two do the same work; a failure ends ours early.
        "built": {"answers": len(built), "median_verdict_cold_s": median([r["ours"]["seconds_cold"] for r in built]),
                  "median_torch_build_s": median([r["torch"]["seconds"] for r in built])},
        "failed": {"answers": len(failed), "median_verdict_cold_s": median([r["ours"]["seconds_cold"] for r in failed]),
                   "median_torch_build_s": median([r["torch"]["seconds"] for r in failed])},
    }


def judged_speed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ours = [r["ours"]["seconds_cold"] for r in rows if r["torch"]["calls"]]
    theirs = [r["torch"]["seconds"] for r in rows if r["torch"]["calls"]]
    if not ours:
        return {"answers": 0}
    mine, torch_s = statistics.median(ours), statistics.median(theirs)
    return {"answers": len(ours), "median_verdict_cold_s": round(mine, 2), "median_torch_build_s": round(torch_s, 2),
            "ratio_of_medians": round(mine / torch_s, 3),
            "median_verdict_warm_s": round(statistics.median([r["ours"]["seconds_warm"] for r in rows]), 2),
            "max_verdict_warm_s": max(r["ours"]["seconds_warm"] for r in rows),
            "median_cpu_warm_s": median_of([r["ours"].get("cpu_seconds_warm") for r in rows])}


def median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def prebuild_headers(corpus: list[dict[str, Any]], cache: Path, reuse: Path | None) -> dict[str, Any]:
    """The parent's precompiled headers for the corpus's flag sets, into `cache`'s trusted tree, as
    `header_prebuild` makes them for a sandboxed job (built once; `reuse` links an earlier tree)."""
    from agentforge.evaluator import build_cache, header_prebuild

    trusted = cache / build_cache.TRUSTED_TREE
    cache.mkdir(parents=True, exist_ok=True)
    if reuse is not None:
        if not (reuse / build_cache.TRUSTED_TREE).is_dir():
            raise SystemExit(f"--headers {reuse}: no prebuilt headers there ({build_cache.TRUSTED_TREE} is missing)")
        trusted.symlink_to((reuse / build_cache.TRUSTED_TREE).resolve(), target_is_directory=True)
        return {"reused": str(reuse), "notes": [p.read_text().strip() for p in trusted.glob(".done-*")]}
    sets = {f for answer in corpus for f in header_prebuild.flag_sets(answer["answer"])}
    notes, started = [], time.perf_counter()
    for flags in sorted(sets, key=lambda f: f.digest()):
        done = subprocess.run([sys.executable, "-m", "agentforge.evaluator.header_prebuild", "--cache", str(cache),
                               "--spec", json.dumps({"cflags": flags.cflags, "includes": flags.includes,
                                                     "cuda": flags.cuda})],
                              capture_output=True, text=True, timeout=3600, cwd=REPO)
        notes.append((done.stdout + done.stderr).strip()[-300:])
    return {"built_s": round(time.perf_counter() - started, 1), "notes": notes}


def built_outside_module_body(answer: str) -> bool:
    """Whether the answer's first load_inline call is indented (inside a function or method)."""
    match = re.search(r"^([ \t]*).*\bload_inline\(", answer, re.MULTILINE)
    return bool(match and match[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git", type=Path, help="a clone or mirror of deepreinforce-ai/CUDA-L1")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--levels", default="1,2")
    parser.add_argument("--start", type=int, default=0, help="skip the first answers (another run has them)")
    parser.add_argument("--merge", type=Path, nargs="+", help="merge the reports of runs on parts of the corpus")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--headers", type=Path, help="a cache whose trusted tree holds prebuilt headers to reuse")
    parser.add_argument("--skip-refused", action="store_true", help="no torch build where ours refuses by policy")
    parser.add_argument("--no-torch", action="store_true", help="ours only (its warm CPU time, say)")
    parser.add_argument("--capture", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.capture:
        capture_main()
        return
    if args.merge:
        parts = [json.loads(path.read_text()) for path in args.merge]
        merged = {row["where"]: row for part in parts for row in part["answers"]}
        rows = list(merged.values())
        headers = next((part["precompiled_headers"] for part in parts if part.get("precompiled_headers")), None)
        report = write_report(args.out, rows, headers) if args.out else {"summary": summarise(rows)}
        print(json.dumps(report["summary"], indent=1))
        return
    from agentforge.evaluator.worker.compile_only import cuda_home, find_nvcc

    nvcc = find_nvcc()
    if nvcc is None or args.git is None:
        parser.error("needs nvcc and --git")
    nvcc_home = cuda_home(nvcc) or str(Path(nvcc).resolve().parent.parent)
    corpus = read_corpus(args.git, CUDA_L1, tuple(args.levels.split(",")), args.limit)[args.start:]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kb-answers-") as scratch:
        headers = prebuild_headers(corpus, Path(scratch) / "cache", args.headers)
        print(f"precompiled headers: {headers}", flush=True)
        for i, answer in enumerate(corpus):
            load = os.getloadavg()[0]
            ours = our_verdict(answer, Path(scratch) / "cache")
            if args.no_torch or (args.skip_refused and refused_by_policy(ours)):
                theirs = {"verdict": "skipped", "calls": 0, "seconds": 0.0, "first_error": "", "capture_note": ""}
            else:
                theirs = torch_verdict(capture_calls(answer), nvcc_home)
            row = {"where": answer["where"], "built_outside_module_body": built_outside_module_body(answer["answer"]),
                   "load_average_1min": round(load, 2), "ours": ours, "torch": theirs}
            row["agree"] = None if theirs["verdict"] == "skipped" else agree(ours, theirs)
            rows.append(row)
            if args.out:  # kept up to date, so that an interrupted run leaves what it measured
                write_report(args.out, rows, headers)
            print(f"[{i + 1}/{len(corpus)}] {answer['where']}: ours {ours['status']} ({ours['seconds_cold']} s, "
                  f"warm {ours['seconds_warm']} s), torch {theirs['verdict']} ({theirs['seconds']} s)"
                  f"{'  DISAGREE' if row['agree'] is False else ''} (load {load:.1f})", flush=True)
    report = write_report(args.out, rows, headers) if args.out else {"summary": summarise(rows)}
    print(json.dumps(report["summary"], indent=1))


def write_report(out: Path, rows: list[dict[str, Any]], headers: dict[str, Any] | None = None) -> dict[str, Any]:
    report = {"benchmark": "kernelbench_answers", "when": datetime.now(UTC).isoformat(timespec="seconds"),
              "machine": machine(), "load_average": os.getloadavg(),
              "source": {"repo": CUDA_L1.repo, "commit": CUDA_L1.commit, "file": CUDA_L1.path},
              "arch": ARCH, "notes": __doc__, "precompiled_headers": headers, "summary": summarise(rows),
              "answers": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
