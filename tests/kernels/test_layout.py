"""Every shipped kernel folder is well-formed, its tunables apply, and its record is honest."""

from __future__ import annotations

import ast
import json

import pytest

from agentforge.candidate import BACKENDS, code_hash
from agentforge.kernel_library import (
    COMPILE_ONLY,
    INTERPRETER,
    RECORD_SCHEMA,
    ReferenceKernel,
    apply_params,
    list_kernels,
    variant_sources,
)
from agentforge.task import load_task

KERNELS = list_kernels()
IDS = [f"{k.gpu}/{k.task_name}" for k in KERNELS]


def test_the_library_ships_cpu_cuda_and_triton_kernels():
    backends = {k.backend for k in KERNELS}
    assert {"cpu", "cuda", "triton"} <= backends
    assert len([k for k in KERNELS if k.backend == "cpu"]) >= 6


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_folder_is_well_formed(kernel: ReferenceKernel):
    tree = ast.parse(kernel.source)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "ModelNew" in classes
    meta = json.loads((kernel.path / "meta.json").read_text())
    assert meta["backend"] in BACKENDS and meta["backend"] == kernel.backend
    assert meta["task"] == kernel.task_name
    assert (kernel.gpu == "cpu") == (kernel.backend == "cpu")
    task = load_task(kernel.task_name)  # the task it answers exists and loads
    assert task.name == kernel.task_name
    marker = {"cpu": "load_cpp", "cuda": "load_inline", "triton": "@triton.jit"}[kernel.backend]
    assert marker in kernel.source


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_tunables_apply_and_every_variant_parses(kernel: ReferenceKernel):
    assert kernel.tunables, "every shipped kernel declares TUNABLES"
    variants = variant_sources(kernel, limit=64)
    assert variants[0][1] == kernel.source
    assert len({code_hash(src) for _, src in variants}) == len(variants)
    for params, source in variants:
        assigned = _assignments(source)  # parses it: one parse per variant
        for name, value in params.items():
            assert assigned.get(name, "unassigned") == value, name
    for name, values in kernel.tunables.items():
        for value in values:  # each declared value is substituted into the build (not just the Python)
            changed = apply_params(kernel.source, {name: value})
            assert _assigned(changed, name) == value
        if kernel.backend == "triton":  # a launch argument (constexpr, num_warps, ...) reads it
            assert name in _names_read(kernel.source), f"{name} is never passed to a launch"
        else:  # an f-string puts it into the C++/CUDA source
            assert "{" + name + "}" in kernel.source, f"{name} never reaches the compiled source"


def _assignments(source: str) -> dict[str, object]:
    """The values of the module-level `NAME = <literal>` assignments (quotes and spacing aside)."""
    found: dict[str, object] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found.setdefault(node.targets[0].id, ast.literal_eval(node.value))  # the first one counts
            except (ValueError, TypeError, SyntaxError):  # not a literal
                continue
    return found


def _assigned(source: str, name: str) -> object:
    """The value of the module-level `name = <literal>` assignment."""
    found = _assignments(source)
    assert name in found, f"no module-level assignment of {name}"
    return found[name]


def _names_read(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_record_is_honest(kernel: ReferenceKernel):
    record = kernel.record
    if record is None:
        pytest.skip("not recorded yet")
    assert record["schema"] == RECORD_SCHEMA
    assert record["task"] == kernel.task_name and record["gpu"] == kernel.gpu
    assert record["kernel_hash"] == code_hash(kernel.source), "stale record: re-run benchmarks/reference_kernels.py"
    summary = record["summary"]
    if not record["measured"]:
        assert summary["speedup"] is None and summary["speedup_vs_compile"] is None
        assert summary["accepted"] is False
        assert set(record["results"]) == ({INTERPRETER} if kernel.backend == "triton" else {COMPILE_ONLY})
        if kernel.backend == "triton":  # what the interpreter checked is what the record says
            (result,) = record["results"].values()
            shapes = {c["shape"] for c in result["correctness"]}
            assert sorted(shapes) == summary["interpreter_shapes"]
            passed = bool(shapes) and all(c["passed"] for c in result["correctness"])
            assert summary["interpreter_correct"] == passed
        for result in record["results"].values():
            assert result["speedup"] is None and result["timing"] is None
        return
    assert record["results"] and set(record["results"]) == set(summary["per_shape"])
    for shape, result in record["results"].items():
        assert result["timing"] is not None or not result["accepted"]
        assert summary["per_shape"][shape]["speedup"] == result["speedup"]
    if summary["speedup"] is not None:
        assert summary["accepted"]


def test_measured_property_ignores_compile_only_records(tmp_path):
    folder = tmp_path / "h100" / "level1" / "relu"
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text("class ModelNew: pass\n")
    (folder / "record.json").write_text(json.dumps({"measured": False, "summary": {}}))
    (kernel,) = list_kernels(root=tmp_path)
    assert kernel.backend == "cuda" and not kernel.measured


TRITON = [k for k in KERNELS if k.backend == "triton"]


@pytest.mark.parametrize("kernel", TRITON, ids=[f"{k.gpu}/{k.task_name}" for k in TRITON])
def test_every_shipped_triton_kernel_was_right_in_the_interpreter_and_compiled(kernel: ReferenceKernel):
    """No GPU has run these yet: a Triton kernel ships only once the interpreter found it correct on
    the shapes it could run and Triton compiled every launched kernel for the target."""
    assert kernel.record is not None, "run benchmarks/reference_kernels.py --gpu h100 --compile-only"
    summary = kernel.record["summary"]
    if kernel.record["measured"]:
        assert summary["accepted"]
        return
    assert summary["interpreter_correct"], summary.get("error")
    assert summary["compiled"] and summary["resources"]
    assert all(r["shared_bytes"] is None or r["shared_bytes"] <= 227 * 1024 for r in summary["resources"])
