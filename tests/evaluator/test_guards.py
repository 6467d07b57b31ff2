"""Run-time evidence: aten ops dispatched, tampering, threads and processes, reference calls, outputs."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from agentforge.evaluator import guards
from agentforge.evaluator.judge import compare as compare_module
from torch import nn


def test_op_recorder_sees_compute_and_ignores_allocation() -> None:
    x = torch.randn(8, 8)
    with guards.OpRecorder() as rec:
        y = torch.empty_like(x)
        torch.relu(x)
        torch.matmul(x, x)
        y.view(64)
    compute = rec.compute_ops()
    assert "aten::relu" in compute
    assert any(op in compute for op in ("aten::mm", "aten::matmul"))
    assert "aten::empty_like" not in compute and "aten::view" not in compute
    assert "aten::relu" not in rec.compute_ops(allowed=("aten::relu",))


def test_op_recorder_sees_ops_dispatched_by_a_functional_call_inside_a_module() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with guards.OpRecorder() as rec:
        model(torch.randn(2, 4))
    assert {"aten::addmm", "aten::relu"} <= set(rec.counts)


def test_op_recorder_sees_nothing_from_a_ctypes_kernel() -> None:
    import ctypes

    x = torch.randn(16)
    y = torch.empty_like(x)
    with guards.OpRecorder() as rec:
        ctypes.memmove(y.data_ptr(), x.data_ptr(), 16 * 4)
    assert rec.compute_ops() == {}


@pytest.fixture
def restore_allclose():
    saved = torch.allclose
    yield
    torch.allclose = saved


def test_tamper_snapshot_detects_a_replaced_function(restore_allclose: None) -> None:
    snapshot = guards.TamperSnapshot.take()
    assert snapshot.changes() == ([], [])
    torch.allclose = lambda *a, **k: True
    patched, switched = snapshot.changes()
    assert patched == ["torch.allclose"] and switched == []


def test_tamper_snapshot_detects_a_swapped_code_object() -> None:
    snapshot = guards.TamperSnapshot.take()
    original = compare_module.same_result.__code__
    compare_module.same_result.__code__ = (lambda first, second: True).__code__
    try:
        patched, _ = snapshot.changes()
    finally:
        compare_module.same_result.__code__ = original
    assert "agentforge.evaluator.judge.compare.same_result" in patched
    assert snapshot.changes() == ([], [])


def test_tamper_snapshot_ignores_calls_and_new_attributes() -> None:
    snapshot = guards.TamperSnapshot.take()
    torch.allclose(torch.zeros(1), torch.zeros(1))
    time.perf_counter()
    torch.nn.Module.some_new_attribute_for_the_test = 1
    try:
        assert snapshot.changes() == ([], [])
    finally:
        del torch.nn.Module.some_new_attribute_for_the_test


def test_tamper_snapshot_reports_precision_switches() -> None:
    snapshot = guards.TamperSnapshot.take()
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium" if saved != "medium" else "high")
    try:
        _, switched = snapshot.changes()
    finally:
        torch.set_float32_matmul_precision(saved)
    assert any(s.startswith("torch.float32_matmul_precision") for s in switched)
    assert guards.TamperSnapshot.take().switches == snapshot.switches


def test_concurrency_watch_sees_a_thread_left_running_and_not_a_finished_one() -> None:
    done = threading.Thread(target=lambda: None)
    watch = guards.ConcurrencyWatch.start()
    done.start()
    done.join()
    assert watch.leftovers() == []
    stop = threading.Event()
    runner = threading.Thread(target=stop.wait, name="sneaky", daemon=True)
    runner.start()
    try:
        found = watch.still_running("when forward returned")
    finally:
        stop.set()
        runner.join()
    assert found == ["thread 'sneaky' still running when forward returned"]


def test_concurrency_watch_sees_a_child_process() -> None:
    import subprocess
    import sys

    watch = guards.ConcurrencyWatch.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = watch.leftovers()
    finally:
        child.kill()
        child.wait()
    assert found == [f"child process {child.pid} still running"]


class Reference(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Subclass(Reference):
    pass


class Wrapper(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_module_call_watch_sees_the_reference_called_from_inside() -> None:
    with guards.ModuleCallWatch() as watch:
        Wrapper(Reference())(torch.ones(1))
    assert watch.called(Reference) == [f"{__name__}.Reference"]
    with guards.ModuleCallWatch() as watch:
        Wrapper(Subclass())(torch.ones(1))
    assert watch.called(Reference) == [f"{__name__}.Subclass"]
    with guards.ModuleCallWatch() as watch:
        Wrapper(nn.ReLU())(torch.ones(1))
    assert watch.called(Reference) == []


def test_module_call_watch_removes_its_hook() -> None:
    with guards.ModuleCallWatch() as watch:
        pass
    Reference()(torch.ones(1))
    assert watch.classes == set()


def test_inspect_outputs_accepts_a_plain_fresh_tensor() -> None:
    x = torch.randn(4)
    assert guards.inspect_outputs([torch.relu(x)], [x]) == []


def test_inspect_outputs_flags_aliases_subclasses_and_non_tensors() -> None:
    x = torch.randn(4, 4)

    class Sub(torch.Tensor):
        pass

    assert guards.inspect_outputs([x], [x])[0][0] == "output_aliases_input"
    assert guards.inspect_outputs([x[1]], [x])[0][0] == "output_aliases_input"  # a view
    assert guards.inspect_outputs([torch.zeros(4).as_subclass(Sub)], [x])[0][0] == "lazy_output"
    assert guards.inspect_outputs([[1.0, 2.0]], [x])[0][0] == "output_type"
    assert guards.inspect_outputs([torch.empty(4, device="meta")], [x])[0][0] == "lazy_output"


def test_tamper_snapshot_covers_the_ops_the_reference_calls_and_the_task_loader() -> None:
    from agentforge.task import Task

    snapshot = guards.TamperSnapshot.take()
    namespace = vars(torch)
    saved_relu, saved_inputs = namespace["relu"], Task.make_inputs
    namespace["relu"] = lambda x: x
    Task.make_inputs = lambda self, *a, **k: []
    try:
        patched, _ = snapshot.changes()
    finally:
        namespace["relu"] = saved_relu
        Task.make_inputs = saved_inputs
    assert {"torch.relu", "agentforge.task.Task.make_inputs"} <= set(patched)
    assert snapshot.changes() == ([], [])


def test_tamper_snapshot_sees_a_closure_cell_swapped_in_place() -> None:
    """`cell.cell_contents = other` leaves `__closure__` the same tuple: the function behind
    `torch.random.fork_rng` (a context manager's generator) swapped that way is a patch."""
    snapshot = guards.TamperSnapshot.take()
    cell = torch.random.fork_rng.__closure__[0]
    original = cell.cell_contents
    cell.cell_contents = lambda *args, **kwargs: original(*args, **kwargs)
    try:
        patched, _ = snapshot.changes()
    finally:
        cell.cell_contents = original
    assert patched == ["torch.random.fork_rng"]
    assert snapshot.changes() == ([], [])


def test_tamper_snapshot_sees_what_a_disable_dynamo_wrapper_is_told_to_call() -> None:
    """torch's `_disable_dynamo` wrapper (the OpRecorder's `__torch_dispatch__`, `torch.manual_seed`)
    calls what it caches on the function it wraps: set by a candidate, every operator the recorder
    should count goes elsewhere, with no function replaced. Its own first call, after the snapshot,
    is not a patch."""
    snapshot = guards.TamperSnapshot.take()
    torch.manual_seed(3)  # first calls after the snapshot
    with guards.OpRecorder() as recorder:
        torch.ones(3).relu()
    assert recorder.counts.get("aten::relu") == 1
    assert snapshot.changes() == ([], [])

    wrapped = guards.OpRecorder.__torch_dispatch__.__wrapped__
    cached = vars(wrapped)["__dynamo_disable"]
    setattr(wrapped, "__dynamo_disable", lambda mode, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})))
    try:
        with guards.OpRecorder() as blind:
            torch.ones(3).relu()
        patched, _ = snapshot.changes()
    finally:
        setattr(wrapped, "__dynamo_disable", cached)
    assert blind.counts == {}  # what the door does: the recorder saw nothing
    assert patched == ["agentforge.evaluator.guards.OpRecorder.__torch_dispatch__"]
    assert snapshot.changes() == ([], [])

    # one level down: the function dynamo's cached wrapper calls, swapped through its own cell
    cell = dict(zip(cached.__code__.co_freevars, cached.__closure__, strict=True))["fn"]
    original = cell.cell_contents
    cell.cell_contents = lambda mode, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))
    try:
        patched, _ = snapshot.changes()
    finally:
        cell.cell_contents = original
    assert patched == ["agentforge.evaluator.guards.OpRecorder.__torch_dispatch__"]
    assert snapshot.changes() == ([], [])
