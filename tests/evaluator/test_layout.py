"""The trust boundary, read from the code: every import, at module level or inside a function.

`sandbox/` imports the evaluator, never the reverse; the judge never imports the worker's side (it
drives the worker through `protocol/` only), and the worker never imports the judge's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, with `from X import y` also counted as X.y (y may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _crossings(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for name in sorted(_imports(path)):
            if name.startswith(forbidden):
                out.append(f"{path.relative_to(REPO)} imports {name}")
    return out


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("evaluator", ("agentforge.sandbox",)),
    ("evaluator/judge", ("agentforge.evaluator.worker",)),
    ("evaluator/worker", ("agentforge.evaluator.judge",)),
    ("evaluator/protocol", ("agentforge.evaluator.judge", "agentforge.evaluator.worker", "agentforge.sandbox")),
])
def test_no_import_crosses_the_boundary(folder: str, forbidden: tuple[str, ...]) -> None:
    assert _crossings(folder, forbidden) == []


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from agentforge.sandbox import seccomp\n    import agentforge.sandbox.worker\n")
    assert {"agentforge.sandbox.seccomp", "agentforge.sandbox.worker"} <= _imports(source)
