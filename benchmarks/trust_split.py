"""Full CPU evaluations per minute: the judge + candidate-worker design against an earlier commit's
single-child design, in one invocation on one machine.

    python benchmarks/trust_split.py [--base 60aec05] [--jobs 8] [--workers 2] [--machine NAME]
    python benchmarks/trust_split.py --base 3bb97b2 --name eval_speed --label "spares + private flush"

Any two commits compare this way (`--name` names the result file); where this tree's sandbox has warm
spares, it uses one per worker, as the CLI does.

The earlier design is unpacked from git (`git archive`, nothing checked out in this tree) and
imported through a small package shim on PYTHONPATH, for the benchmark process and its sandbox
children alike. Both sides run `eval_throughput.bench_evaluate`: distinct lean C++ ReLU candidates
(every job builds), full pipeline with timing against eager, through the process sandbox. The two
designs run alternately, `--rounds` times each, so that the machine's load moves both alike.

Writes results/benchmarks/trust_split-<machine>.json (and prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAPPED = ("evaluator", "sandbox", "rl")


def unpack(commit: str, into: Path) -> Path:
    """The tree of `commit` under `into/src`, and a shim under `into/shim` that imports it as
    `agentforge` (its code folders mapped the way setup.py maps them). Returns the shim."""
    src, shim = into / "src", into / "shim"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(src, filter="data")
    package = shim / "agentforge"
    package.mkdir(parents=True)
    for entry in (src / "agentforge").iterdir():
        (package / entry.name).symlink_to(entry)
    for folder in MAPPED:
        (package / folder).symlink_to(src / folder)
    return shim


SIDE = """
import json, statistics, sys, tempfile, time
sys.path.insert(0, {bench!r})
import eval_throughput as b
import agentforge
from agentforge.evaluation import evaluate_many
from agentforge.sandbox import SandboxConfig

cache = tempfile.mkdtemp(prefix="af-trust-")
extra = {{"warm_spares": {workers}}} if "warm_spares" in SandboxConfig.__dataclass_fields__ else {{}}
config = SandboxConfig(cache_dir=cache, timeout_s=600, python_paths={paths!r}, **extra)
jobs = b._jobs({jobs}, cache, "cpu", quick=False)
start = time.perf_counter()
results = evaluate_many(jobs, config, workers={workers})
wall = time.perf_counter() - start
print(json.dumps({{"jobs": {jobs}, "workers": {workers}, "wall_s": wall, "candidates_per_minute": 60 * {jobs} / wall,
                  "median_evaluator_s": statistics.median(r.provenance.duration_s for r in results),
                  "statuses": sorted({{r.status.value for r in results}}), "agentforge": agentforge.__file__}}))
"""


def run_side(label: str, jobs: int, workers: int, shim: Path | None) -> dict:
    """One side in a fresh interpreter, started outside the repository (so that `agentforge`
    resolves to the shim when one is given, in the benchmark process and its sandbox children)."""
    env = dict(os.environ)
    paths = (str(shim),) if shim is not None else ()
    if shim is not None:
        env["PYTHONPATH"] = str(shim)
    code = SIDE.format(bench=str(REPO / "benchmarks"), paths=paths, jobs=jobs, workers=workers)
    with tempfile.TemporaryDirectory(prefix="af-side-") as cwd:
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    expected = str(shim) if shim is not None else str(REPO)
    if not row["agentforge"].startswith(expected):
        raise RuntimeError(f"{label} imported agentforge from {row['agentforge']}, not {expected}")
    row["design"] = label
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="60aec05", help="the commit with the single-child design")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--machine", default=f"cpu-{os.cpu_count()}core")
    parser.add_argument("--name", default="trust_split", help="the result file's stem")
    parser.add_argument("--label", default="judge + worker", help="what this tree's design is called")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="af-base-") as tmp:
        shim = unpack(args.base, Path(tmp))
        rows = []
        for _ in range(args.rounds):
            rows.append(run_side(f"base ({args.base})", args.jobs, args.workers, shim))
            rows.append(run_side(f"{args.label} (this tree)", args.jobs, args.workers, None))
    summary = {}
    for design in sorted({r["design"] for r in rows}):
        rates = [r["candidates_per_minute"] for r in rows if r["design"] == design]
        summary[design] = {"candidates_per_minute_median": statistics.median(rates), "runs": rates}
    import torch

    report = {
        "benchmark": args.name, "base": args.base, "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": args.machine, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "torch": torch.__version__, "python": platform.python_version(), "jobs": args.jobs,
        "workers": args.workers, "summary": summary, "rows": rows,
    }
    out = REPO / "results" / "benchmarks" / f"{args.name}-{args.machine}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
