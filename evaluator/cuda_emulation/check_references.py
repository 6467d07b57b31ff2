"""Run the shipped CUDA C++ reference kernels in the CPU emulation and record what was measured.

    python -m agentforge.evaluator.cuda_emulation.check_references [--shapes small,odd] [--write]
        [--max-elements N]

Each kernel under results/kernels/h100 whose `load_inline` has CUDA sources is built by the
emulation (in this process: these are the project's own kernels, not candidates), then called on
each shape variant of its task, seed 1, against the task's `Model` on the CPU at the task's
tolerance. With `--write`, the outcome goes into the kernel's record.json as `cpu_emulation`
(shapes checked, passed, the worst error, seconds, machine and date); shapes not run are listed
as such, never counted as passed. Shapes past `judge.MAX_ELEMENTS` input elements (or
`--max-elements N`; 0 lifts the cap) or whose check would not fit in the available memory are
left out with the reason. A new run's shapes join those an earlier run recorded.
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


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (the physical memory otherwise when there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# A check holds the inputs, the candidate's and the reference's outputs and the reference's
# temporaries: about this many times the inputs' bytes (a task's outputs are at most its inputs' size).
FOOTPRINT = 4


def too_big(task: Any, shape: str, max_elements: int, memory: int) -> str:
    """Why a shape is left out ("" when it runs): past the element cap, or not fitting in memory."""
    numel = task.input_numel(shape)
    if numel is None:
        return ""
    if max_elements and numel > max_elements:
        return f"{numel} input elements, past the cap of {max_elements} (judge.MAX_ELEMENTS unless --max-elements)"
    need = numel * 4 * FOOTPRINT  # 4 bytes an element bounds fp32, bf16 and fp16 inputs
    if need > memory:
        return f"{numel} input elements need about {need / 2**30:.1f} GiB, {memory / 2**30:.1f} GiB available"
    return ""


def run(path: Path, shapes: list[str] | None, max_elements: int = 0) -> dict[str, Any]:
    from agentforge.task import Task

    rel = path.parent.relative_to(KERNELS).as_posix()
    task = Task(rel, (REPO / "tasks" / f"{rel}.py").read_text())
    started = time.perf_counter()
    module = _load(path)
    build_s = round(time.perf_counter() - started, 2)
    wanted = [s for s in task.shapes if shapes is None or s in shapes]
    skipped = {}
    for shape in list(wanted):
        why = too_big(task, shape, max_elements, int(available_bytes() * 0.7))
        if why:
            skipped[shape] = why
            wanted.remove(shape)
            print(rel, json.dumps({"shape": shape, "not_run": why}), flush=True)
    results = []
    for shape in wanted:
        try:
            results.append(check_shape(task, module, shape))
        except Exception as exc:  # a fault of the kernel (or its host code) is a failed shape
            results.append({"shape": shape, "passed": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print(rel, json.dumps(results[-1]), flush=True)
    return {"task": rel, "build_seconds": build_s, "shapes": results, "skipped": skipped,
            "not_run": [s for s in task.shapes if s not in wanted]}


def record(path: Path, outcome: dict[str, Any]) -> None:
    """The run's shapes into the record's cpu_emulation, beside the shapes an earlier run checked
    (each shape keeps its own date, machine load and seconds)."""
    file = path.parent / "record.json"
    data = json.loads(file.read_text())
    old = data.get("cpu_emulation") or {}
    now = datetime.now(UTC).isoformat(timespec="seconds")
    load = [round(x, 2) for x in os.getloadavg()]
    by_shape = {s["shape"]: s for s in old.get("shapes", [])}
    for shape in outcome["shapes"]:
        by_shape[shape["shape"]] = {**shape, "date": now, "load_average": load}
    order = [*outcome["shapes"], *old.get("shapes", [])]
    shapes = [by_shape[n] for n in dict.fromkeys(s["shape"] for s in order)]
    reasons = {**(old.get("not_run_why") or {}), **outcome.get("skipped", {})}
    not_run = [s for s in list(dict.fromkeys([*old.get("not_run", []), *outcome["not_run"]])) if s not in by_shape]
    data["cpu_emulation"] = {
        "shapes": shapes, "not_run": not_run,
        "not_run_why": {s: reasons[s] for s in not_run if s in reasons},
        "passed": bool(shapes) and all(s["passed"] for s in shapes),
        "build_seconds": outcome["build_seconds"],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_average": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__},
        "how": "CUDA C++ executed by the CPU emulation (agentforge.evaluator.cuda_emulation), seed 1, "
               "against the task's Model on the CPU at the task's tolerance; since 2026-11-26 04:45 UTC "
               "with guard pages around every allocation and shared window (an out-of-bounds access fails)",
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
    parser.add_argument("--max-elements", type=int, default=-1,
                        help="leave out shapes with more input elements (default judge.MAX_ELEMENTS; 0: no cap, "
                             "shapes still have to fit in the available memory)")
    parser.add_argument("--figures", default="", help="time a warm rebuild and a small check of --only, into this file")
    args = parser.parse_args(argv)
    if args.figures:
        print(json.dumps(figures(KERNELS / args.only / "kernel.py", Path(args.figures))))
        return 0
    shapes = [s for s in args.shapes.split(",") if s] or None
    from agentforge.evaluator.cuda_emulation.judge import MAX_ELEMENTS

    cap = MAX_ELEMENTS if args.max_elements < 0 else args.max_elements
    failed = 0
    for path in cuda_kernels():
        if args.only and path.parent.relative_to(KERNELS).as_posix() not in args.only.split(","):
            continue
        outcome = run(path, shapes, cap)
        failed += not all(s["passed"] for s in outcome["shapes"])
        if args.write:
            record(path, outcome)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
