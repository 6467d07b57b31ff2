"""The integrity rules: each has a name, a one-line meaning, and evidence when it fires.

Static rules read the candidate's source (AST); dynamic rules turn the run-time evidence of
`guards` and `timing` into flags. Every rule here has an adversarial test in `tests/exploits/`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from agentforge.evaluator.result import Flag

RULES: dict[str, str] = {
    "torch_fallback": "ModelNew.forward dispatches PyTorch compute instead of its own kernel",
    "try_except_fallback": "a try/except around the kernel falls back to PyTorch",
    "reference_reuse": "ModelNew subclasses, builds or calls the reference Model",
    "input_mutation": "the candidate changed its inputs",
    "output_type": "an output is not a tensor",
    "lazy_output": "an output is a Tensor subclass or has no materialised storage",
    "output_aliases_input": "an output shares memory with an input",
    "nondeterministic_output": "two calls on the same inputs gave different results",
    "result_caching": "new input contents in the same buffers gave the old result",
    "timed_output_mismatch": "an output re-checked during timing was wrong",
    "background_work": "threads or processes started by the candidate outlive the call",
    "unsynchronized_work": "work still runs after forward returns (side stream, async launch)",
    "monkey_patch": "the candidate replaced functions of torch, the timer or the evaluator",
    "precision_switch": "the candidate changed process-wide precision switches (TF32, default dtype)",
    "forbidden_introspection": "the candidate inspects frames, the garbage collector or the harness",
    "shape_specialised": "correct on the default shape but not on other shape variants",
    "l2_persistence": "the candidate set a persisting-L2 carve-out or access window",
    "below_speed_of_light": "measured time below the task's speed-of-light floor",
    "speedup_over_10x": "speedup over 10x: marked for a person's audit",
}

# Calls that reach PyTorch compute from Python (for the static view of torch_fallback).
_TORCH_ROOTS = {"torch", "F", "nn", "functional"}
_INTROSPECTION = {"gc", "inspect", "traceback"}
_INTROSPECTION_CALLS = {"_getframe", "currentframe", "get_objects", "get_referrers", "settrace", "setprofile"}
_BACKGROUND = {"threading", "multiprocessing", "concurrent", "subprocess", "_thread", "asyncio"}
_PATCH_TARGETS = {"torch", "time", "builtins", "agentforge", "F", "nn", "sys", "os"}


@dataclass(frozen=True)
class StaticFinding:
    rule: str
    evidence: str


def flag(rule: str, evidence: str, severity: str = "reject") -> Flag:
    if rule not in RULES:
        raise KeyError(f"unknown integrity rule {rule!r}")
    return Flag(rule=rule, evidence=evidence, severity=severity)


def static_findings(source: str) -> list[StaticFinding]:
    """AST checks of the candidate module."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    findings: list[StaticFinding] = []
    findings += _reference_reuse(tree)
    findings += _try_except_fallback(tree)
    findings += _imports(tree)
    findings += _patching(tree)
    return findings


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Call):
        return _root_name(node.func)
    return node.id if isinstance(node, ast.Name) else None


def _reference_reuse(tree: ast.Module) -> list[StaticFinding]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id == "Model":
                    found.append(StaticFinding("reference_reuse", "class ModelNew(Model) subclasses the reference"))
        if isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load):
            found.append(StaticFinding("reference_reuse", f"line {node.lineno} refers to the reference `Model`"))
        if isinstance(node, ast.ImportFrom) and any(a.name == "Model" for a in node.names):
            found.append(StaticFinding("reference_reuse", f"line {node.lineno} imports a `Model`"))
    return _dedupe(found)


def _try_except_fallback(tree: ast.Module) -> list[StaticFinding]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        for handler in node.handlers:
            for inner in ast.walk(handler):
                if isinstance(inner, ast.Call) and _root_name(inner.func) in _TORCH_ROOTS:
                    found.append(StaticFinding(
                        "try_except_fallback",
                        f"line {handler.lineno}: an except handler calls {ast.unparse(inner.func)}",
                    ))
                    break
    return _dedupe(found)


def _imports(tree: ast.Module) -> list[StaticFinding]:
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
        for name in names:
            if name in _INTROSPECTION:
                found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} imports {name}"))
            if name in _BACKGROUND:
                found.append(StaticFinding("background_work", f"line {node.lineno} imports {name}"))
        if isinstance(node, ast.Attribute) and node.attr in _INTROSPECTION_CALLS:
            found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} uses .{node.attr}"))
    return _dedupe(found)


def _patching(tree: ast.Module) -> list[StaticFinding]:
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and _root_name(target) in _PATCH_TARGETS:
                found.append(StaticFinding("monkey_patch", f"line {node.lineno} assigns {ast.unparse(target)}"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and node.args and _root_name(node.args[0]) in _PATCH_TARGETS):
            found.append(StaticFinding("monkey_patch", f"line {node.lineno} calls setattr on {ast.unparse(node.args[0])}"))
    return _dedupe(found)


def _dedupe(findings: list[StaticFinding]) -> list[StaticFinding]:
    seen: dict[str, StaticFinding] = {}
    for f in findings:
        seen.setdefault(f.rule + f.evidence, f)
    return list(seen.values())
