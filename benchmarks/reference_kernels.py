"""Re-measure every shipped reference kernel on this machine and regenerate the results table.

    python benchmarks/reference_kernels.py                  # what this machine can measure
    python benchmarks/reference_kernels.py --compile-only   # also nvcc-check CUDA kernels (no GPU)
    python benchmarks/reference_kernels.py --table-only     # only rebuild results/kernels/README.md

Each kernel goes through the hardened evaluator (sandboxed, baselines timed in the same process),
one job per shape variant; its `record.json` is rewritten from the EvalResults, and the table
between the markers of `results/kernels/README.md` is rebuilt from the records, never by hand.

What is measured where: CPU kernels (`results/kernels/cpu/`) on any machine; CUDA kernels of the
local GPU's folder (`h100` on an H100, ...) when torch sees a GPU; with `--compile-only` and no
GPU, CUDA kernels get nvcc's sm_90a verdict and a record that says `"measured": false`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", help="kernel folder to measure (default: cpu, plus the local GPU's)")
    parser.add_argument("--task", help="only these tasks (comma-separated: level/name, bare name or substring)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--baselines", default="eager,compile", help="comma-separated: eager, compile")
    parser.add_argument("--compile-modes", default="default,max-autotune",
                        help="torch.compile modes of the compile baseline (max-autotune is skipped on CPU)")
    parser.add_argument("--compile-only", action="store_true",
                        help="also give CUDA kernels nvcc's compile-only verdict when no GPU is visible")
    parser.add_argument("--shapes", default="", help="comma-separated shape variants (default: a CPU kernel's "
                        "cpu and small variants where its task has a cpu one, else every variant)")
    parser.add_argument("--max-elements", type=int, default=None,
                        help="skip shape variants with more input elements (recorded as skipped)")
    parser.add_argument("--time-cap", type=float, default=None, help="seconds of timing per subject and shape")
    parser.add_argument("--max-reps", type=int, default=200, help="most timed repetitions per subject")
    parser.add_argument("--note", action="append", default=[], help="a note to keep in every record written")
    parser.add_argument("--quick", action="store_true", help="short timing (for a smoke run, not for records)")
    parser.add_argument("--table-only", action="store_true", help="rebuild the README table from the records")
    parser.add_argument("--dry-run", action="store_true", help="measure and print, write nothing")
    parser.add_argument("--root", type=Path, default=None, help="kernel library root (default results/kernels)")
    parser.add_argument("--tasks-root", type=Path, default=None, help="task files (default tasks/)")
    parser.add_argument("--isolation", default="auto", help="sandbox isolation: auto, bwrap, unshare, none")
    parser.add_argument("--cache-dir", default="~/.cache/agentforge", help="build cache of the sandbox")
    return parser.parse_args(argv)


def _targets(args: argparse.Namespace, device: str) -> list:
    """The kernels this run measures (or compile-checks)."""
    from agentforge.kernel_library import gpu_slug, select_kernels

    if args.gpu:
        slugs = [args.gpu]
    else:
        slugs = ["cpu"]
        if device.startswith("cuda"):
            import torch

            slugs.append(gpu_slug(torch.cuda.get_device_name(device)))
        elif args.compile_only:
            slugs += sorted({k.gpu for k in select_kernels(None, None, args.root)} - {"cpu"})
    wanted = [t for t in (args.task or "").split(",") if t] or [None]
    found = [k for slug in slugs for task in wanted for k in select_kernels(slug, task, args.root)]
    return list({k.path: k for k in found}.values())


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    from agentforge.kernel_library import kernels_root, list_kernels, render_table, update_readme

    root = args.root or kernels_root()
    failures = 0
    if not args.table_only:
        failures = _measure_all(args)
    table = render_table(list_kernels(None, root))
    if args.dry_run:
        print(table)
    else:
        changed = update_readme(root / "README.md", table)
        print(f"{root / 'README.md'}: {'rewritten' if changed else 'unchanged'}")
    return 1 if failures else 0


def _measure_all(args: argparse.Namespace) -> int:
    import torch
    from agentforge.evaluator.result import TimingConfig
    from agentforge.sandbox import SandboxConfig

    from agentforge.kernel_library import (
        COMPILE_ONLY,
        MeasureOptions,
        build_record,
        evaluate_kernel,
        kernel_task,
        skipped_shapes,
        will_measure,
        write_record,
    )

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    options = MeasureOptions(
        device=device,
        baselines=tuple(b for b in args.baselines.split(",") if b),
        compile_modes=tuple(m for m in args.compile_modes.split(",") if m),
        timing=TimingConfig(warmup=2, min_reps=5, max_reps=20, time_cap_s=1.0) if args.quick else _timing(args),
        max_input_elements=args.max_elements,
        shapes=tuple(x for x in args.shapes.split(",") if x),
    )
    sandbox = SandboxConfig(isolation=args.isolation, cache_dir=str(Path(args.cache_dir).expanduser()))
    failures = 0
    for kernel in _targets(args, device):
        if kernel.backend != "cpu" and not device.startswith("cuda") and not args.compile_only:
            continue
        started = time.perf_counter()
        task = kernel_task(kernel, args.tasks_root)
        skipped = skipped_shapes(task, options, kernel.backend) if will_measure(kernel, device) else {}
        results = evaluate_kernel(kernel, task, options, sandbox)
        if not results:
            print(f"{kernel.gpu}/{kernel.task_name}: every shape variant skipped; record left as it was")
            continue
        record = build_record(kernel, results, skipped, args.note)
        summary = record["summary"]
        ok = summary["accepted"] or (not record["measured"] and summary.get("compiled")
                                     and summary.get("interpreter_correct", True))
        failures += not ok
        figures = (f"{_x(summary['speedup'])} vs eager, {_x(summary['speedup_vs_compile'])} vs compile"
                   if record["measured"] else f"{next(iter(results))}: {summary.get('status')}, "
                   f"{summary.get('max_registers')} regs, {summary.get('spill_bytes')} B spilled")
        print(f"{kernel.gpu}/{kernel.task_name}: accepted={summary['accepted']} {figures} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        for shape, result in results.items():
            if not (result.accepted or (shape == COMPILE_ONLY and result.compiled)):
                print(f"  {shape}: {result.summary()}", flush=True)
        if not args.dry_run:
            write_record(kernel, record)
    return failures


def _timing(args: argparse.Namespace):
    """The evaluator's default timing, or a shorter cap per subject when --time-cap is given."""
    from agentforge.evaluator.result import TimingConfig

    return None if args.time_cap is None else TimingConfig(time_cap_s=args.time_cap, max_reps=args.max_reps)


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


if __name__ == "__main__":
    sys.exit(main())
