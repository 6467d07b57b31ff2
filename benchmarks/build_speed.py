"""Build time of a KernelBench `load_inline` C++ candidate (torch/extension.h + pybind11), cold and warm.

Measured in one run on this machine, each build in a fresh Python process (torch's in-process JIT
state never helps one), all in one scratch build cache:

* `torch_load_inline`: torch's own `load_inline` into an empty build folder: what every cold
  build cost before the precompiled header (the baseline).
* `fully_cold`: agentforge's `cached_load_inline` with an empty build cache: the precompiled
  `torch/extension.h` is built first (once per compiler and flag set), then the extension.
* `cold_pch_warm`: a source never built before, the precompiled header in the cache: the cold
  build every kernel after the first meets.
* `warm`: the same source again (a cache hit): load only.
* `sandboxed`: the cold build as a user meets it: `agentforge`'s evaluation of a new candidate
  through the process sandbox (its file-size limit, unprivileged uid), the header prebuilt by the
  parent into the cache's trusted tree (`evaluator/header_prebuild.py`, run for real first); the
  seconds are the build's own, from the verdict's compile record (`--sandboxed` only, alternated
  with `torch_load_inline` so the machine's load hits both alike).

Each build records its wall seconds, the CPU seconds of the compiler processes it ran (less
sensitive than wall time to other work on the machine) and the load average around it. Sources
differ by a comment only, so each cold build is new to the cache and costs the same.

    python benchmarks/build_speed.py [--out results/benchmarks/build_speed-<date>.json] [--repeats 3]
    python benchmarks/build_speed.py --sandboxed [--repeats 3]   # the sandboxed mode alone
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: fp32 only");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        o[i] = v < 0.f ? 0.f : v;
    }
    return out;
}
// variant SALT
"""
MODES = ("torch_load_inline", "fully_cold", "cold_pch_warm", "warm", "sandboxed")
REPO = Path(__file__).resolve().parent.parent
CANDIDATE = REPO / "tests" / "evaluator" / "candidates" / "relu_load_inline_cpp.py"


def sandboxed_builds(cache: str, repeats: int) -> list[dict]:
    """Prebuild the header as the CLI's parent does, then evaluate `repeats` new candidates through
    the sandbox (build and correctness only) and read each build's seconds from its verdict."""
    from agentforge.evaluator.result import Measure
    from agentforge.sandbox import SandboxConfig

    from agentforge.candidate import Candidate
    from agentforge.evaluation import evaluate, make_job
    from agentforge.task import load_task

    prebuilt = subprocess.run([sys.executable, "-m", "agentforge.evaluator.header_prebuild", "--cache", cache,
                               "--spec", json.dumps({"cflags": [], "includes": [], "cuda": False})],
                              capture_output=True, text=True, timeout=1800)
    if prebuilt.returncode != 0 or "built in" not in prebuilt.stdout:
        raise RuntimeError(f"the header prebuild failed:\n{prebuilt.stdout}{prebuilt.stderr[-3000:]}")
    task, rows = load_task("level1/relu"), []
    for r in range(repeats):
        source = CANDIDATE.read_text().replace("return out;", f"return out;  // sandboxed {r}")
        load_avg = os.getloadavg()[0]
        job = make_job(task, Candidate(source, "cpu"), device="cpu", shapes=("small",),
                       measure=Measure(timing=False, baselines=()), cache_dir=cache)
        result = evaluate(job, SandboxConfig(cache_dir=cache, warm_spares=0))
        if result.compile is None or not result.compile.ok or result.compile.cached:
            raise RuntimeError(f"sandboxed build {r}: {result.status} {result.error}")
        rows.append({"mode": "sandboxed", "salt": f"sandboxed{r}", "seconds": result.compile.seconds,
                     "compiler_cpu_s": None, "cached": False,
                     "pch": result.compile.log_tail.splitlines()[0], "load_avg_before": load_avg,
                     "load_avg_after": os.getloadavg()[0]})
        rows.append(run_one("torch_load_inline", cache, f"torch{r}"))  # alternated: the load hits both alike
    return rows


def build_once(mode: str, cache: str, salt: str) -> dict:
    """One build in this process (run by `--one`); what it cost."""
    import torch
    from agentforge.evaluator import build_cache, native
    from torch.utils import cpp_extension

    source = CPP_SOURCE.replace("SALT", salt)
    load_avg = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    if mode == "torch_load_inline":
        folder = Path(cache) / "torch" / salt
        folder.mkdir(parents=True)
        module = cpp_extension.load_inline(f"relu_torch_{salt}", cpp_sources=source, functions=["relu_forward"],
                                           build_directory=str(folder))
        event = None
    else:
        build_cache.set_cache_root(cache)
        module = native.cached_load_inline("relu_ext", cpp_sources=source, functions=["relu_forward"])
        event = native.BUILD_EVENTS[-1]
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    x = torch.randn(1000)
    assert torch.equal(module.relu_forward(x), torch.relu(x)), "the built kernel is wrong"
    return {"mode": mode, "salt": salt, "seconds": seconds,
            "compiler_cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "cached": event.cached if event else False, "pch": event.pch if event else "",
            "load_avg_before": load_avg, "load_avg_after": os.getloadavg()[0]}


def run_one(mode: str, cache: str, salt: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--one", mode, cache, salt], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> dict:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    gxx = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "cxx": gxx, "os": platform.platform()}


def summary(rows: list[dict]) -> dict:
    seconds = [r["seconds"] for r in rows]
    cpu = [r["compiler_cpu_s"] for r in rows if r["compiler_cpu_s"] is not None]
    return {"n": len(rows), "median_s": statistics.median(seconds), "min_s": min(seconds), "max_s": max(seconds),
            "median_compiler_cpu_s": statistics.median(cpu) if cpu else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=f"results/benchmarks/build_speed-{datetime.now(UTC):%Y-%m-%d}.json")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sandboxed", action="store_true", help="measure the sandboxed mode alone")
    args = parser.parse_args()
    started = datetime.now(UTC)
    rows: list[dict] = []
    pch_bytes = None
    if args.sandboxed:
        with tempfile.TemporaryDirectory(prefix="build-speed-") as cache:
            rows = sandboxed_builds(cache, args.repeats)
        if args.out.startswith("results/benchmarks/build_speed-"):
            args.out = args.out.replace("build_speed-", "build_speed_sandboxed-")
    else:
        _all_modes(rows, args.repeats)
        pch = Path(rows[0]["pch"].split(" (")[0])
        pch_bytes = pch.stat().st_size if pch.is_file() else None
    report = {
        "benchmark": "build_speed",
        "when": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "notes": __doc__,
        "precompiled_header_bytes": pch_bytes,
        "modes": {mode: summary([r for r in rows if r["mode"] == mode]) for mode in MODES
                  if any(r["mode"] == mode for r in rows)},
        "runs": rows,
    }
    text = json.dumps(report, indent=1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    print(text)


def _all_modes(rows: list[dict], repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="build-speed-") as cache:
        rows.append(run_one("fully_cold", cache, "first"))
        for r in range(repeats):  # interleaved, so the machine's other work hits every mode alike
            rows.append(run_one("torch_load_inline", cache, f"torch{r}"))
            rows.append(run_one("cold_pch_warm", cache, f"new{r}"))
            rows.append(run_one("warm", cache, f"new{r}"))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        print(json.dumps(build_once(*sys.argv[2:])))
    else:
        main()
