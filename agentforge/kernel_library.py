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
        return self.record is not None


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
