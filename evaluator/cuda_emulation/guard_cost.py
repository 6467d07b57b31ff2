"""What the guard-page allocator (include/agentforge_emu/guarded_memory.h) costs, measured.

    python -m agentforge.evaluator.cuda_emulation.guard_cost [--kernel level1/softmax] [--rounds 3] [--out F]

Each round runs two child processes one after the other, with the guards on and off (`--child
--guard off`: the child's entry sets AGENTFORGE_EMU_GUARD=off, the switch guarded_memory.h reads,
before the emulated extension loads; `--guard on` removes it): each loads the reference kernel's
emulated extension (warm in the build cache: run check_references first), then times an allocation
and free of CPU tensors of several sizes (the fill of fresh pages included) and the kernel's
`small`-shape check (median of 5). Alternating the sides in one run keeps a loaded machine's noise
on both; the summary gives each side's median over the rounds and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SIZES = (64, 4096, 65536, 4 << 20)  # bytes
GUARD_VARIABLE = "AGENTFORGE_EMU_GUARD"  # read by include/agentforge_emu/guarded_memory.h


def set_guard_switch(guard: bool) -> None:
    """The process-wide switch of guarded_memory.h, set by a child's entry before any emulated
    extension loads (the header reads it once, at the first load)."""
    if guard:
        os.environ.pop(GUARD_VARIABLE, None)
    else:
        os.environ[GUARD_VARIABLE] = "off"


def child(kernel: str, guard: bool) -> dict[str, Any]:
    """Time allocations and the kernel's `small` check in this process; `guard` is the switch its
    entry set (`set_guard_switch`), reported as given."""
    import torch
    from agentforge.evaluator.cuda_emulation import check_references as refs

    from agentforge.task import Task

    task = Task(kernel, (refs.REPO / "tasks" / f"{kernel}.py").read_text())
    module = refs._load(refs.KERNELS / kernel / "kernel.py")
    out: dict[str, Any] = {"guard": guard}
    for size in SIZES:
        count = max(200, min(20000, (64 << 20) // size))
        started = time.perf_counter()
        for _ in range(count):
            t = torch.empty(size, dtype=torch.uint8)
            t.fill_(1)  # touches every page, as a real input does
            del t
        out[f"alloc_fill_free_{size}_us"] = round((time.perf_counter() - started) / count * 1e6, 2)
    checks = []
    for _ in range(5):
        result = refs.check_shape(task, module, "small")
        assert result["passed"], result
        checks.append(result["seconds"])
    out["small_check_s"] = statistics.median(checks)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", default="level1/softmax")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--guard", choices=("on", "off"), default="on", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        set_guard_switch(args.guard == "on")
        print(json.dumps(child(args.kernel, args.guard == "on")))
        return 0
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    load = []
    for _ in range(args.rounds):
        for guard in (True, False):
            proc = subprocess.run([sys.executable, "-m", "agentforge.evaluator.cuda_emulation.guard_cost", "--child",
                                   "--guard", "on" if guard else "off", "--kernel", args.kernel],
                                  capture_output=True, text=True, check=True)
            runs[guard].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            load.append(round(os.getloadavg()[0], 2))
    keys = [k for k in runs[True][0] if k != "guard"]
    summary = {k: {"guard": statistics.median(r[k] for r in runs[True]),
                   "no_guard": statistics.median(r[k] for r in runs[False])} for k in keys}
    for value in summary.values():
        value["ratio"] = round(value["guard"] / value["no_guard"], 2) if value["no_guard"] else None
    data = {"kernel": args.kernel, "rounds": args.rounds, "summary": summary, "runs": runs,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                        "load_average_per_child": load},
            "how": "python -m agentforge.evaluator.cuda_emulation.guard_cost (children alternate guard on/off)"}
    text = json.dumps(data, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
