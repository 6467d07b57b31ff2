"""A problem's size globals scaled down: copies of a task file with its large sizes divided.

KernelBench's problems declare one GPU-sized shape as module globals (`batch_size = 4096`,
`dim = 393216`). The audit and the CPU backend need a smaller one of the same problem. Each step
here divides every integer size above `KEEP_SIZE` (kernel sizes, strides and head counts stay) by
2, 4, 8... and rewrites the copy's source where the file assigns them, so that globals derived from
the sizes (`bias_shape = (out_channels, 1, 1)`) follow. Standard library and torch only: the
sandbox's task probe uses it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from agentforge.task import DEFAULT_SHAPE, Task, TaskLoadError

#: Sizes at or below this are kept when shrinking a problem (kernel sizes, strides, heads).
KEEP_SIZE = 16
MAX_HALVINGS = 15


@dataclass(frozen=True)
class Shrunk:
    """One step: the copy, its divisor, and the sizes it assigns in place of the file's."""

    task: Task
    divisor: int
    sizes: dict[str, int]


def shrink_steps(task: Task) -> Iterator[Shrunk]:
    """Copies of `task` with its large integer sizes divided by 2, 4, 8..., smallest divisor
    first; stops when every size is down to KEEP_SIZE or a copy no longer loads."""
    sizes = {k: v for k, v in task.sizes(DEFAULT_SHAPE).items() if type(v) is int and v > KEEP_SIZE}
    if not sizes:
        return
    try:
        tree = ast.parse(task.source)
    except SyntaxError:
        return
    previous: dict[str, int] = {}
    for halvings in range(1, MAX_HALVINGS + 1):
        divisor = 2**halvings
        shrunk = {k: max(KEEP_SIZE, v // divisor) for k, v in sizes.items()}
        if shrunk == previous:
            return
        previous = shrunk
        try:
            copy = Task(task.name, ast.unparse(assign_sizes(tree, shrunk)), task.path)
        except TaskLoadError:
            return
        yield Shrunk(copy, divisor, shrunk)


def assign_sizes(tree: ast.Module, sizes: dict[str, int]) -> ast.Module:
    """`tree` with each top-level assignment of a name in `sizes` (`n = ...`, `a = b = ...`,
    `h, w = 128, 128`) assigning the new value instead; other statements untouched."""
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            node = _reassigned(node, sizes)
        body.append(node)
    return ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))


def _reassigned(node: ast.Assign, sizes: dict[str, int]) -> ast.Assign:
    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
    if names and len(names) == len(node.targets) and all(n in sizes for n in names):
        return ast.Assign(targets=node.targets, value=ast.Constant(sizes[names[0]]), lineno=node.lineno)
    target, value = node.targets[0], node.value
    if (len(node.targets) == 1 and isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)):
        elts = [ast.Constant(sizes[t.id]) if isinstance(t, ast.Name) and t.id in sizes else v
                for t, v in zip(target.elts, value.elts, strict=True)]
        return ast.Assign(targets=node.targets, value=ast.Tuple(elts=elts, ctx=ast.Load()), lineno=node.lineno)
    return node
