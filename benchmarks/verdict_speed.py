"""Wall time of one `agentforge eval` as a user types it, this tree against an earlier commit,
interleaved in one invocation on one machine.

    python benchmarks/verdict_speed.py [--base 8cac002] [--rounds 3] [--machine NAME]

Each side runs the same command in a fresh folder through its own CLI:

    agentforge eval level1/relu results/kernels/cpu/level1/relu/kernel.py --backend cpu --json

with the default baselines (eager and torch.compile). "Warm" is the state a user is in at their
second verdict: each side first runs the command once (not counted) into a build cache of its own,
then the sides alternate, `--rounds` runs each, so that the machine's load moves both alike. The
earlier tree is unpacked from git into a copy of this environment where it is installed instead
(its sandbox children, started with that interpreter, import it too).
Each row keeps the verdict's own duration, its stages' seconds where the side reports them, and the
load average around it.

Writes results/benchmarks/verdict_speed-<machine>.json (and prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trust_split import REPO

TASK = "level1/relu"
CANDIDATE = REPO / "results" / "kernels" / "cpu" / "level1" / "relu" / "kernel.py"


def base_environment(commit: str, into: Path) -> str:
    """A copy of this virtual environment with `commit`'s tree installed in it (editable, offline);
    its interpreter's path."""
    import shutil
    import tarfile

    src, env = into / "src", into / "venv"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(src, filter="data")
    shutil.copytree(sys.prefix, env, symlinks=True, copy_function=os.link)  # hard links: no copy of torch
    python = str(env / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(src)],
                   check=True, capture_output=True)
    return python


def run_once(label: str, python: str, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFORGE_")}
    env["AGENTFORGE_CACHE_DIR"] = str(cache)
    argv = [python, "-m", "agentforge", "eval", TASK, str(CANDIDATE), "--backend", "cpu", "--json"]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="af-verdict-") as cwd:
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - started
    try:
        verdict = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"{label}: no verdict (exit {done.returncode}):\n{done.stderr[-3000:]}") from None
    prov = verdict.get("provenance", {})
    # From a folder outside the repository, as the command ran (in the repository the checkout's own
    # package shadows the environment's install, and both sides seemed to import this tree).
    with tempfile.TemporaryDirectory(prefix="af-which-") as elsewhere:
        agentforge_from = subprocess.run([python, "-c", "import agentforge; print(agentforge.__file__)"],
                                         capture_output=True, text=True, cwd=elsewhere).stdout.strip()
    return {"side": label, "agentforge": agentforge_from, "wall_s": round(wall, 2), "exit": done.returncode,
            "status": verdict.get("status"),
            "accepted": verdict.get("accepted"), "speedup": verdict.get("speedup"),
            "speedup_vs_compile": verdict.get("speedup_vs_compile"),
            "compile_baseline": "compile-default" in (verdict.get("timing") or {}).get("baselines", {}),
            "verdict_duration_s": prov.get("duration_s"), "stage_seconds": prov.get("stage_seconds"),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="8cac002", help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--machine", default=f"cpu-{os.cpu_count()}core")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="af-base-") as tmp:
        Path(tmp).chmod(0o755)  # the sandbox's uid runs the base environment's interpreter
        base_python = base_environment(args.base, Path(tmp))
        caches = {"base": Path(tmp) / "cache-base", "this": Path(tmp) / "cache-this"}
        for cache in caches.values():
            cache.mkdir()
            cache.chmod(0o777)
        sides = [(f"base ({args.base})", base_python, caches["base"]), ("this tree", sys.executable, caches["this"])]
        for label, python, cache in sides:  # warm-up: the user's first verdict, not counted
            rows.append({**run_once(label, python, cache), "warm_up": True})
        for _ in range(args.rounds):
            for label, python, cache in sides:
                rows.append({**run_once(label, python, cache), "warm_up": False})
    summary = {}
    for label, _, _ in sides:
        walls = [r["wall_s"] for r in rows if r["side"] == label and not r["warm_up"]]
        summary[label] = {"median_wall_s": statistics.median(walls), "runs": walls}
    base_median = summary[sides[0][0]]["median_wall_s"]
    this_median = summary["this tree"]["median_wall_s"]
    import torch

    report = {
        "benchmark": "verdict_speed", "command": f"agentforge eval {TASK} {CANDIDATE.relative_to(REPO)} "
                                                "--backend cpu --json", "base": args.base,
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": args.machine,
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
        "python": platform.python_version(), "summary": summary,
        "ratio_this_to_base": round(this_median / base_median, 3), "rows": rows,
    }
    out = REPO / "results" / "benchmarks" / f"verdict_speed-{args.machine}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
