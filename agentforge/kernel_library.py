"""The shipped reference kernels: `results/kernels/<gpu>/<level>/<task>/`.

Each folder holds `kernel.py` (KernelBench answer format, a module defining `ModelNew`) and,
once measured, `record.json` (the hardened EvalResults per shape variant and a summary). A kernel
declares its tunable parameters at module level, e.g.

    BLOCK_SIZE = 256
    TUNABLES = {"BLOCK_SIZE": [128, 256, 512]}

and a variant is the same source with those assignments rewritten, so a kernel can be re-tuned
on another GPU. `<gpu>` is a slug (`h100`, `h200`, `a100`, ...) or `cpu` for the CPU backend.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ReferenceKernel:
    task_name: str  # level1/relu
    gpu: str  # h100 | h200 | cpu | ...
    backend: str  # cuda | triton | cpu
    path: Path
    source: str
    tunables: dict[str, list[Any]]
    record: dict[str, Any] | None  # None until measured

    @property
    def measured(self) -> bool:
        """A record from a run on the kernel's own device (a compile-only record is not one)."""
        return self.record is not None and bool(self.record.get("measured", True))


def kernels_root() -> Path:
    return Path(__file__).resolve().parent.parent / "results" / "kernels"


def gpu_slug(device_name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `h100`; `cpu` stays `cpu`."""
    name = device_name.lower()
    for slug in ("h200", "h100", "b200", "a100", "l40s", "4090", "3090"):
        if slug in name:
            return slug if slug[0].isalpha() else f"rtx{slug}"
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown"


def list_kernels(gpu: str | None = None, root: Path | None = None) -> list[ReferenceKernel]:
    root = root or kernels_root()
    found = []
    for kernel_file in sorted(root.glob("*/level*/*/kernel.py")):
        folder = kernel_file.parent
        slug = folder.parent.parent.name
        if gpu is None or slug == gpu:
            found.append(_load(folder, slug))
    return found


def find_kernel(task_name: str, backend: str, gpu: str | None = None, root: Path | None = None
                ) -> ReferenceKernel | None:
    """The shipped kernel for a task and backend; on `gpu` if given, else any GPU's (for CUDA
    kernels a kernel tuned elsewhere is still a valid starting point)."""
    matches = [k for k in list_kernels(None, root) if k.task_name == task_name and k.backend == backend]
    if gpu is not None:
        exact = [k for k in matches if k.gpu == gpu]
        matches = exact or matches
    return matches[0] if matches else None


def select_kernels(gpu: str | None = None, task: str | None = None, root: Path | None = None
                   ) -> list[ReferenceKernel]:
    """Shipped kernels on `gpu` (every slug if None) whose task is `task`: an exact `level/name`,
    or a bare name or substring (`relu`, `level1/`)."""
    kernels = list_kernels(gpu, root)
    if task is None:
        return kernels
    exact = [k for k in kernels if k.task_name == task or k.task_name.split("/", 1)[-1] == task]
    return exact or [k for k in kernels if task.lower() in k.task_name.lower()]


def variant_sources(kernel: ReferenceKernel, limit: int = 8) -> list[tuple[dict[str, Any], str]]:
    """(params, source) for the kernel's tunable variants, the shipped setting first."""
    names = list(kernel.tunables)
    if not names:
        return [({}, kernel.source)]
    combos = itertools.product(*(kernel.tunables[n] for n in names))
    shipped = _current_values(kernel.source, names)
    variants = [(shipped, kernel.source)]
    for values in combos:
        params = dict(zip(names, values, strict=True))
        if params != shipped:
            variants.append((params, apply_params(kernel.source, params)))
        if len(variants) >= limit:
            break
    return variants


def apply_params(source: str, params: dict[str, Any]) -> str:
    """Rewrite the module-level `NAME = value` assignments of a kernel source."""
    for name, value in params.items():
        pattern = re.compile(rf"^{re.escape(name)}\s*=\s*[^\n#]+", re.M)
        if not pattern.search(source):
            raise KeyError(f"the kernel has no module-level assignment of {name}")
        source = pattern.sub(f"{name} = {value!r}", source, count=1)
    return source


def _current_values(source: str, names: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in names):
            values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def _tunables(source: str) -> dict[str, list[Any]]:
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "TUNABLES"):
            return dict(ast.literal_eval(node.value))
    return {}


def _load(folder: Path, slug: str) -> ReferenceKernel:
    source = (folder / "kernel.py").read_text()
    record_file = folder / "record.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else None
    meta_file = folder / "meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    backend = meta.get("backend") or ("cpu" if slug == "cpu" else "cuda")
    return ReferenceKernel(
        task_name=f"{folder.parent.name}/{folder.name}", gpu=slug, backend=backend, path=folder,
        source=source, tunables=_tunables(source), record=record,
    )


# ----- measuring and recording --------------------------------------------------------------
# A record is what the hardened evaluator said about one shipped kernel on one machine:
#   {"schema", "task", "gpu", "backend", "kernel_hash", "measured", "date", "machine", "versions",
#    "track", "summary": {...}, "results": {shape: EvalResult.to_dict()}}
# `measured` is true only when correctness and timing ran on the kernel's own device; a CUDA
# kernel compiled without a GPU gets a compile-only record with no speedup in it.
RECORD_SCHEMA = 1
TABLE_START = "<!-- kernels-table:start -->"
TABLE_END = "<!-- kernels-table:end -->"


@dataclass(frozen=True)
class MeasureOptions:
    """How to re-measure shipped kernels. `device`: cpu, cuda or cuda:N (CUDA kernels get a
    compile-only verdict when it is cpu); empty `shapes`: every shape variant of the task."""

    device: str = "cpu"
    baselines: tuple[str, ...] = ("eager", "compile")
    compile_modes: tuple[str, ...] = ("default", "max-autotune")
    shapes: tuple[str, ...] = ()
    timing: Any = None  # an evaluator TimingConfig; None: the evaluator's defaults
    cuda_arch: str = "sm_90a"
    max_input_elements: int | None = None  # skip (and record as skipped) larger shape variants
    # Triton kernels without a GPU run in the interpreter (numpy, program by program): only the
    # shape variants up to this many input elements are checked there.
    interpreter_max_elements: int = 1 << 18


# Result keys of the records of kernels that did not run on their GPU.
COMPILE_ONLY = "compile-only"  # CUDA: nvcc's verdict for the target
INTERPRETER = "interpreter"  # Triton: correctness in the interpreter, then Triton's compile for the target
UNMEASURED_KEYS = frozenset({COMPILE_ONLY, INTERPRETER})


def wanted_shapes(task: Any, options: MeasureOptions, backend: str | None = None) -> tuple[str, ...]:
    """The shape variants a run measures: those asked for; else, for a CPU kernel, the CPU backend's
    default (`cpu`, then `small`) when the task declares a `cpu` variant; else every variant."""
    from agentforge.task import backend_default_shapes

    if options.shapes:
        return tuple(options.shapes)
    chosen = backend_default_shapes(tuple(task.shapes), backend) if backend == "cpu" else ()
    return chosen or tuple(task.shapes)


def skipped_shapes(task: Any, options: MeasureOptions, backend: str | None = None) -> dict[str, str]:
    """Shape variants this run leaves out, and why (too many input elements for the machine)."""
    if options.max_input_elements is None:
        return {}
    skipped = {}
    for shape in wanted_shapes(task, options, backend):
        numel = task.input_numel(shape)
        if numel is not None and numel > options.max_input_elements:
            skipped[shape] = f"{numel:,} input elements, over this run's budget of {options.max_input_elements:,}"
    return skipped


def interpreter_shapes(task: Any, options: MeasureOptions) -> list[str]:
    """The shape variants small enough for Triton's interpreter (the smallest one at least)."""
    wanted = options.shapes or tuple(task.shapes)
    fit = [s for s in wanted if (n := task.input_numel(s)) is not None and n <= options.interpreter_max_elements]
    return fit or [task.smallest_shape()]


def kernel_task(kernel: ReferenceKernel, tasks_root: Path | None = None) -> Any:
    """The Task a shipped kernel answers (`level1/relu` -> tasks/level1/relu.py)."""
    from agentforge.task import load_task

    return load_task(kernel.task_name, tasks_root)


def will_measure(kernel: ReferenceKernel, device: str) -> bool:
    """True when the kernel runs (correctness and timing) on `device`, false for compile-only."""
    if kernel.backend == "cpu":
        return True
    return device.startswith("cuda")


def evaluate_kernel(kernel: ReferenceKernel, task: Any, options: MeasureOptions,
                    sandbox: Any = None) -> dict[str, Any]:
    """The hardened evaluator's verdicts on a shipped kernel: one EvalResult per shape variant
    (each timed on its own shape), or a single compile-only verdict when the kernel cannot run
    here. Returns {shape or "compile-only": EvalResult}."""
    from agentforge.candidate import Candidate, Provenance
    from agentforge.evaluation import evaluate, make_job
    from agentforge.evaluator.result import Measure

    candidate = Candidate(kernel.source, backend=kernel.backend,
                          provenance=Provenance(source="library", note=f"{kernel.gpu}/{kernel.task_name}"))
    device = "cpu" if kernel.backend == "cpu" else options.device
    if not will_measure(kernel, device) and kernel.backend == "triton":
        job = make_job(task, candidate, device="cpu", cuda_arch=options.cuda_arch,
                       shapes=tuple(interpreter_shapes(task, options)), measure=Measure(timing=False))
        return {INTERPRETER: evaluate(job, sandbox)}
    if not will_measure(kernel, device):
        job = make_job(task, candidate, device="cpu", compile_only=True, cuda_arch=options.cuda_arch,
                       shapes=(task.smallest_shape(),))
        return {COMPILE_ONLY: evaluate(job, sandbox)}
    measure = Measure(baselines=options.baselines, compile_modes=options.compile_modes)
    results: dict[str, Any] = {}
    skipped = skipped_shapes(task, options, kernel.backend)
    shapes = [s for s in wanted_shapes(task, options, kernel.backend) if s not in skipped]
    for shape in sorted(shapes, key=lambda s: (s != "default", s)):
        job = make_job(task, candidate, device=device, shapes=(shape,), timing_shape=shape, measure=measure,
                       timing=options.timing, cuda_arch=options.cuda_arch)
        results[shape] = evaluate(job, sandbox)
    return results


def build_record(kernel: ReferenceKernel, results: dict[str, Any], skipped: dict[str, str] | None = None,
                 notes: list[str] | None = None) -> dict[str, Any]:
    """The record.json of a kernel from its EvalResults (see RECORD_SCHEMA above); `skipped`:
    shape variants left out of the run, with the reason; `notes`: what a reader must know about
    the run (a baseline left out, and why)."""
    import datetime
    import hashlib

    if not results:
        raise ValueError(f"no EvalResults for {kernel.gpu}/{kernel.task_name}: every shape variant was skipped")
    measured = not UNMEASURED_KEYS & set(results)
    first = next(iter(results.values()))
    prov = first.provenance
    device = prov.device
    if measured:
        summary = _measured_summary(results)
    elif INTERPRETER in results:
        summary = _interpreter_summary(first, skipped or {})
    else:
        summary = _compile_summary(first)
    if measured:
        summary["skipped_shapes"] = dict(skipped or {})
    return {
        "schema": RECORD_SCHEMA,
        "task": kernel.task_name,
        "gpu": kernel.gpu,
        "backend": kernel.backend,
        "kernel_hash": hashlib.sha256(kernel.source.encode()).hexdigest()[:16],
        "measured": measured,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "track": prov.track,
        "machine": {
            "device": device.name if device else None,
            "device_kind": device.kind if device else None,
            "capability": device.capability if device else None,
            "cores": device.count if device and device.kind == "cpu" else None,
            "host": prov.host,
            "load_average": _load_average(),
        },
        "versions": dict(prov.versions),
        "notes": list(notes or []),
        "summary": summary,
        "results": {shape: result.to_dict() for shape, result in results.items()},
    }


def write_record(kernel: ReferenceKernel, record: dict[str, Any]) -> Path:
    path = kernel.path / "record.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=False, allow_nan=False) + "\n")
    return path


def _stats(stats: Any) -> dict[str, Any] | None:
    if stats is None:
        return None
    return {"median": stats.median_us, "mean": stats.mean_us, "stdev": stats.stdev_us, "min": stats.min_us,
            "max": stats.max_us, "n": stats.n, "rel_stderr": stats.rel_stderr}


def _best_compile(result: Any) -> tuple[str | None, Any]:
    if result.timing is None:
        return None, None
    modes = [(s.median_us, k, s) for k, s in result.timing.baselines.items() if k.startswith("compile")]
    if not modes:
        return None, None
    _, name, stats = min(modes, key=lambda m: m[0])
    return name, stats


def _geomean(values: list[float]) -> float | None:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values)) if values and all(v > 0 for v in values) else None


def _measured_summary(results: dict[str, Any]) -> dict[str, Any]:
    per_shape = {}
    for shape, result in results.items():
        compile_mode, compile_stats = _best_compile(result)
        per_shape[shape] = {
            "status": result.status.value,
            "accepted": result.accepted,
            "speedup": result.speedup,
            "speedup_vs_compile": result.speedup_vs_compile,
            "candidate_us": _stats(result.timing.candidate) if result.timing else None,
            "eager_us": _stats(result.timing.baselines.get("eager")) if result.timing else None,
            "compile_us": _stats(compile_stats),
            "compile_mode": compile_mode,
            "sol_fraction": result.roofline.sol_fraction if result.roofline else None,
            "timing_method": result.timing.method if result.timing else None,
            "flags": [f"{f.rule} ({f.severity})" for f in result.flags],
            "notes": list(result.timing.notes) if result.timing else [],
            "floor_us": result.floor_us,
            "overhead_bound": list(result.timing.overhead_bound) if result.timing else [],
            "headline_speedup": result.headline_speedup,
            "headline_speedup_vs_compile": result.headline_speedup_vs_compile,
        }
    accepted = bool(per_shape) and all(s["accepted"] for s in per_shape.values())
    # A shape whose pair is overhead-bound (within 20x of the harness floor) gives no speedup to
    # average: its ratio stays in per_shape, the means are over the other shapes.
    speedups = [s["headline_speedup"] for s in per_shape.values() if s["headline_speedup"] is not None]
    vs_compile = [s["headline_speedup_vs_compile"] for s in per_shape.values()
                  if s["headline_speedup_vs_compile"] is not None]
    default = per_shape.get("default") or next(iter(per_shape.values()))
    heaviest = _heaviest_shape(per_shape)
    summary = {
        "accepted": accepted,
        "shapes": list(per_shape),
        # Geometric means over the shape variants that are not overhead-bound; None unless every
        # variant was accepted.
        "speedup": _geomean(speedups) if accepted and speedups else None,
        "speedup_vs_compile": _geomean(vs_compile) if accepted and vs_compile else None,
        "overhead_bound_shapes": sorted(k for k, s in per_shape.items() if s["overhead_bound"]),
        # The shape where eager takes longest: on small shapes per-call overheads dominate both sides.
        "heaviest_shape": heaviest,
        "speedup_heaviest": per_shape[heaviest]["speedup"] if heaviest else None,
        "speedup_vs_compile_heaviest": per_shape[heaviest]["speedup_vs_compile"] if heaviest else None,
        "speedup_default": default["speedup"],
        "speedup_vs_compile_default": default["speedup_vs_compile"],
        "sol_fraction": default["sol_fraction"],
        "candidate_us": default["candidate_us"],
        "eager_us": default["eager_us"],
        "compile_us": default["compile_us"],
        "per_shape": per_shape,
    }
    summary["targets"] = _targets(summary)
    return summary


def _heaviest_shape(per_shape: dict[str, dict[str, Any]]) -> str | None:
    timed = [(s["eager_us"]["median"], shape) for shape, s in per_shape.items() if s.get("eager_us")]
    return max(timed)[1] if timed else None


def _targets(summary: dict[str, Any]) -> dict[str, Any]:
    """Issue #8's per-kernel targets, and by how much each is missed."""
    slower = {shape: s["speedup"] for shape, s in summary["per_shape"].items()
              if s["speedup"] is not None and s["speedup"] < 1.0}
    return {
        "faster_than_eager_on_every_shape": summary["accepted"] and not slower,
        "shapes_slower_than_eager": slower,
        "faster_than_compile": (summary["speedup_vs_compile"] >= 1.0
                                if summary["speedup_vs_compile"] is not None else None),
    }


def _compile_summary(result: Any) -> dict[str, Any]:
    comp = result.compile
    resources = [to_plain_resource(r) for r in (comp.resources if comp else ())]
    return {
        "accepted": False,  # correctness and timing await a GPU
        "compiled": bool(comp and comp.ok),
        "status": result.status.value,
        "arch": comp.arch if comp else None,
        "compile_seconds": comp.seconds if comp else None,
        "resources": resources,
        "max_registers": max((r["registers"] or 0 for r in resources), default=None),
        "spill_bytes": sum((r["spill_store_bytes"] or 0) + (r["spill_load_bytes"] or 0) for r in resources),
        "error": (f"{result.error.type}: {result.error.message}"[:500] if result.error else None),
        "speedup": None,
        "speedup_vs_compile": None,
        "note": "compile-only verdict (nvcc, no GPU): correctness and timing await a GPU run",
    }


def _interpreter_summary(result: Any, skipped: dict[str, str]) -> dict[str, Any]:
    """A Triton kernel checked without its GPU: correctness in the interpreter on the shapes that fit,
    then Triton's compile for the target with ptxas's resources. Still no speedup, not accepted."""
    summary = _compile_summary(result)
    checked = sorted({r.shape for r in result.correctness})
    summary.update(
        interpreter_correct=bool(result.correctness) and result.correct,
        interpreter_shapes=checked,
        interpreter_failed=sorted({r.shape for r in result.correctness if not r.passed}),
        max_shared_bytes=max((r["shared_bytes"] or 0 for r in summary["resources"]), default=None),
        flags=[f"{f.rule} ({f.severity})" for f in result.flags],
        skipped_shapes=dict(skipped),
        note="Triton interpreter on the CPU (correctness only, no timing), then Triton's compile for "
             f"{summary['arch']}: timing and the GPU's own correctness check await a GPU run",
    )
    return summary


def to_plain_resource(resource: Any) -> dict[str, Any]:
    return {"name": resource.name, "registers": resource.registers, "shared_bytes": resource.shared_bytes,
            "stack_bytes": resource.stack_bytes, "spill_store_bytes": resource.spill_store_bytes,
            "spill_load_bytes": resource.spill_load_bytes}


def _load_average() -> list[float] | None:
    import os

    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


# ----- the results table ---------------------------------------------------------------------
def summary_row(kernel: ReferenceKernel) -> dict[str, str]:
    """One kernel's recorded figures as display strings (the same for the CLI and the README)."""
    record = kernel.record or {}
    summary = record.get("summary", {})
    row = {"gpu": kernel.gpu, "task": kernel.task_name, "backend": kernel.backend}
    if not record:
        return {**row, "state": "no record", "accepted": "", "vs eager": "", "vs compile": "",
                "time": "", "resources": "", "date": ""}
    date = str(record.get("date", ""))[:10]
    if not record.get("measured"):
        regs = summary.get("max_registers")
        spills = summary.get("spill_bytes")
        compiled = "compiled" if summary.get("compiled") else "compile failed"
        resources = f"{regs} regs, {spills} B spill" if regs is not None else ""
        if summary.get("max_shared_bytes"):
            resources += f", {summary['max_shared_bytes'] / 1024:.0f} KiB smem"
        state = f"not measured ({compiled}, {summary.get('arch')})"
        if "interpreter_correct" in summary:
            failed = summary["interpreter_failed"]
            verdict = ("correct" if summary["interpreter_correct"]
                       else "wrong on " + ", ".join(failed) if failed else "error")
            state = (f"not measured (interpreter: {verdict} on {', '.join(summary['interpreter_shapes'])}; "
                     f"{compiled}, {summary.get('arch')})")
        return {**row, "state": state, "accepted": "awaits GPU", "vs eager": "not measured",
                "vs compile": "not measured", "time": "", "resources": resources, "date": date}
    cand = summary.get("candidate_us") or {}
    per_shape = summary.get("per_shape") or {}
    headline = "default" if "default" in per_shape else next(iter(per_shape), "")
    time_text = f"{cand['median']:.1f} us ± {cand['stdev']:.1f} ({headline})" if cand else ""
    skipped = summary.get("skipped_shapes") or {}
    measured_on = len(summary.get("per_shape", {}))
    state = f"measured ({measured_on} of {measured_on + len(skipped)} shapes)" if skipped else "measured"
    heavy = summary.get("heaviest_shape")
    if heavy is None and per_shape:
        heavy = _heaviest_shape(per_shape)
    heavy_text = f"; {_x(per_shape[heavy]['speedup'])} on {heavy}" if heavy and len(per_shape) > 1 else ""
    heavy_compile = (f"; {_x(per_shape[heavy]['speedup_vs_compile'])} on {heavy}"
                     if heavy and len(per_shape) > 1 and summary.get("speedup_vs_compile") is not None else "")
    return {**row, "state": state, "accepted": "yes" if summary.get("accepted") else "no",
            "vs eager": _x(summary.get("speedup")) + heavy_text,
            "vs compile": _x(summary.get("speedup_vs_compile")) + heavy_compile,
            "time": time_text, "resources": "", "date": date}


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


TABLE_COLUMNS = ("gpu", "task", "backend", "state", "accepted", "vs eager", "vs compile", "time", "resources", "date")
# "vs eager" / "vs compile": the geometric mean over the measured shape variants, then the figure
# on the heaviest one (the shape where eager takes longest). "time": the default shape's median.


def render_table(kernels: list[ReferenceKernel]) -> str:
    """The Markdown results table, from the records alone (deterministic for the same records)."""
    rows = [summary_row(k) for k in sorted(kernels, key=lambda k: (k.gpu, k.task_name))]
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(row[c] for c in TABLE_COLUMNS) + " |" for row in rows]
    lines += ["", *_geomean_lines(kernels)]
    return "\n".join(lines).rstrip() + "\n"


def _geomean_lines(kernels: list[ReferenceKernel]) -> list[str]:
    lines = []
    for gpu in sorted({k.gpu for k in kernels}):
        mine = [k for k in kernels if k.gpu == gpu]
        measured = [k for k in mine if k.record and k.record.get("measured")]
        eager = [k.record["summary"]["speedup"] for k in measured if k.record["summary"].get("speedup")]
        comp = [k.record["summary"]["speedup_vs_compile"] for k in measured
                if k.record["summary"].get("speedup_vs_compile")]
        text = f"**{gpu}**: {len(measured)} of {len(mine)} kernels measured"
        if eager:
            text += f"; geometric mean {_geomean(eager):.2f}x vs eager over {len(eager)}"
        if comp:
            text += f", {_geomean(comp):.2f}x vs the best torch.compile over {len(comp)}"
        lines.append(text + ".")
    return [line + "  " if i < len(lines) - 1 else line for i, line in enumerate(lines)]


def update_readme(readme: Path, table: str) -> bool:
    """Replace the text between the table markers of `readme`; True when it changed."""
    text = readme.read_text() if readme.is_file() else f"# Reference kernels\n\n{TABLE_START}\n{TABLE_END}\n"
    if TABLE_START not in text or TABLE_END not in text:
        text = text.rstrip() + f"\n\n{TABLE_START}\n{TABLE_END}\n"
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    new = f"{head}{TABLE_START}\n{table}{TABLE_END}{tail}"
    if new == text:
        return False
    readme.write_text(new)
    return True
