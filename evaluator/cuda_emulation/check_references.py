"""Run the shipped CUDA C++ reference kernels in the CPU emulation and record what was measured.

    python -m agentforge.evaluator.cuda_emulation.check_references [--shapes small,odd] [--write]

Each kernel under results/kernels/h100 whose `load_inline` has CUDA sources is built by the
emulation (in this process: these are the project's own kernels, not candidates), then called on
each shape variant of its task, seed 1, against the task's `Model` on the CPU at the task's
tolerance. With `--write`, the outcome goes into the kernel's record.json as `cpu_emulation`
(shapes checked, passed, the worst error, seconds, machine and date); shapes not run are listed
as such, never counted as passed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "results" / "kernels" / "h100"


def cuda_kernels() -> list[Path]:
    return sorted(p for p in KERNELS.glob("level*/*/kernel.py") if "cuda_sources" in p.read_text())


def _load(path: Path) -> Any:
    from agentforge.evaluator import native
    from agentforge.evaluator.cuda_emulation.build import load_inline_emulated
    from torch.utils import cpp_extension

    native._torch_load_inline()
    saved = cpp_extension.load_inline
    cpp_extension.load_inline = load_inline_emulated
    try:
        spec = importlib.util.spec_from_file_location(f"emulated_{path.parent.name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        cpp_extension.load_inline = saved


def check_shape(task: Any, module: Any, shape: str) -> dict[str, Any]:
    started = time.perf_counter()
    init = task.init_inputs(shape)
    with task.shape_variant(shape):
        reference = task.module.Model(*init)
    torch.manual_seed(0)
    candidate = module.ModelNew(*init)
    if isinstance(candidate, torch.nn.Module) and isinstance(reference, torch.nn.Module):
        candidate.load_state_dict(reference.state_dict(), strict=False)
    inputs = task.make_inputs(1, shape, "cpu")
    with torch.no_grad():
        expected = reference(*inputs)
        got = candidate(*inputs)
    from agentforge.task import flatten_tensors

    tol = task.tolerance
    pairs = list(zip(flatten_tensors(got), flatten_tensors(expected), strict=False))
    same = len(pairs) == len(list(flatten_tensors(expected))) and all(g.shape == e.shape for g, e in pairs)
    passed = same and all(torch.allclose(g.double(), e.double(), atol=tol.atol, rtol=tol.rtol) for g, e in pairs)
    error = max(float((g.double() - e.double()).abs().max()) for g, e in pairs) if same and pairs else float("inf")
    seconds = round(time.perf_counter() - started, 2)
    return {"shape": shape, "passed": passed, "max_abs_error": error, "seconds": seconds}


def run(path: Path, shapes: list[str] | None) -> dict[str, Any]:
    from agentforge.task import Task

    rel = path.parent.relative_to(KERNELS).as_posix()
    task = Task(rel, (REPO / "tasks" / f"{rel}.py").read_text())
    started = time.perf_counter()
    module = _load(path)
    build_s = round(time.perf_counter() - started, 2)
    wanted = [s for s in task.shapes if shapes is None or s in shapes]
    results = []
    for shape in wanted:
        try:
            results.append(check_shape(task, module, shape))
        except Exception as exc:  # a fault of the kernel (or its host code) is a failed shape
            results.append({"shape": shape, "passed": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print(rel, json.dumps(results[-1]), flush=True)
    return {"task": rel, "build_seconds": build_s, "shapes": results,
            "not_run": [s for s in task.shapes if s not in wanted]}


def record(path: Path, outcome: dict[str, Any]) -> None:
    file = path.parent / "record.json"
    data = json.loads(file.read_text())
    data["cpu_emulation"] = {
        "shapes": outcome["shapes"], "not_run": outcome["not_run"],
        "passed": bool(outcome["shapes"]) and all(s["passed"] for s in outcome["shapes"]),
        "build_seconds": outcome["build_seconds"],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_average": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__},
        "how": "CUDA C++ executed by the CPU emulation (agentforge.evaluator.cuda_emulation), seed 1, "
               "against the task's Model on the CPU at the task's tolerance",
    }
    file.write_text(json.dumps(data, indent=1) + "\n")


def figures(path: Path, out: Path) -> dict[str, Any]:
    """The warm rebuild (the kernel's extension already in the build cache: hash, find, load) and a
    `small`-shape check (build excluded), measured in this process, written to `out`."""
    from agentforge.task import Task

    rel = path.parent.relative_to(KERNELS).as_posix()
    task = Task(rel, (REPO / "tasks" / f"{rel}.py").read_text())
    started = time.perf_counter()
    module = _load(path)
    warm = time.perf_counter() - started
    check = check_shape(task, module, "small")
    data = {"kernel": rel, "warm_rebuild_seconds": round(warm, 3), "small_check_seconds": check["seconds"],
            "small_passed": check["passed"], "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                        "load_average": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__},
            "how": "python -m agentforge.evaluator.cuda_emulation.check_references --figures OUT --only KERNEL, "
                   "after a run that built the kernel; the check is one call of ModelNew and the task's Model"}
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="", help="comma-separated shape variants (default: all)")
    parser.add_argument("--only", default="", help="comma-separated task names (level1/softmax, ...)")
    parser.add_argument("--write", action="store_true", help="write cpu_emulation into each record.json")
    parser.add_argument("--figures", default="", help="time a warm rebuild and a small check of --only, into this file")
    args = parser.parse_args(argv)
    if args.figures:
        print(json.dumps(figures(KERNELS / args.only / "kernel.py", Path(args.figures))))
        return 0
    shapes = [s for s in args.shapes.split(",") if s] or None
    failed = 0
    for path in cuda_kernels():
        if args.only and path.parent.relative_to(KERNELS).as_posix() not in args.only.split(","):
            continue
        outcome = run(path, shapes)
        failed += not all(s["passed"] for s in outcome["shapes"])
        if args.write:
            record(path, outcome)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
