"""The task is checked before any candidate is blamed.

In the judge, before the worker loads the candidate: for each requested shape the task's inputs
are made and its reference is run once. A task that raises, hangs past `TASK_BUDGET_S` or runs
out of memory there is the task's failure (`task_error`, naming the task, the shape and the
cause), never the candidate's.
"""

from __future__ import annotations

import traceback

import torch
from agentforge.evaluator.result import ErrorRecord

from agentforge.task import Task, time_budget

TASK_BUDGET_S = 120.0  # per shape: making the inputs and one reference call


def check(task: Task, shapes: list[str], seed: int, device: torch.device,
          budget_s: float = TASK_BUDGET_S) -> ErrorRecord | None:
    """None when every shape's inputs and reference run; else what went wrong, and where."""
    for shape in shapes:
        stage = "TaskInputsError"
        try:
            with time_budget(budget_s), torch.no_grad():
                inputs = task.make_inputs(seed, shape, device)
                stage = "TaskReferenceError"
                model = task.make_model(seed, shape, device)
                model(*inputs)
                del model, inputs
        except TimeoutError as exc:
            return _record("TaskTimeout", task, shape, f"{_what(stage)} {exc}")
        except (MemoryError, torch.OutOfMemoryError) as exc:
            return _record("TaskMemoryError", task, shape, f"{_what(stage)} ran out of memory ({exc})")
        except Exception as exc:
            return _record(stage, task, shape, f"{_what(stage)} raised {type(exc).__name__}: {exc}",
                           traceback.format_exc())
    return None


def _what(stage: str) -> str:
    return "get_inputs()" if stage == "TaskInputsError" else "the reference Model"


def _record(kind: str, task: Task, shape: str, message: str, tail: str = "") -> ErrorRecord:
    return ErrorRecord(type=kind, message=f"task {task.name}, shape '{shape}': {message}"[:2000],
                       traceback_tail=tail[-4000:])
