"""The loader on tricky files, seeding, shape variants and name resolution."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from agentforge.task import TaskLoadError, discover, load_task, resolve_task_path, task_name_for

#: A problem file exactly as KernelBench writes them: no metadata, torch.rand inputs.
KB_STYLE = (Path(__file__).parent / "kernelbench_style_problem.txt").read_text()

GOOD = '''
import torch
import torch.nn as nn

DTYPE = "float32"
SHAPES = {"small": {"N": 4}, "odd": {"N": 33}}
N = 8

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.w

def get_inputs():
    return [torch.randn(3, N), torch.randint(0, 10, (N,))]

def get_init_inputs():
    return [N]

def flops(N):
    return 3 * N

def bytes_moved(N, DTYPE):
    return 4 * 7 * N if DTYPE == "float32" else 0
'''


def _problem(write_task, source: str) -> str:
    with pytest.raises(TaskLoadError) as info:
        load_task(write_task(source))
    message = str(info.value)
    assert "\n" not in message
    assert "case.py" in message  # names the file
    return info.value.problem


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def broken(:\n    pass\n", "syntax error at line 1"),
        (KB_STYLE.replace("def get_inputs", "def _get_inputs"), "defines no `get_inputs`"),
        (KB_STYLE.replace("class Model(nn.Module)", "class Model(object)").replace(
            "super(Model, self).__init__()", "pass"), "`Model` is not a torch.nn.Module subclass"),
        ("import torch\nraise RuntimeError('boom\\nsecond line')\n", "fails on import: RuntimeError: boom"),
        ("import no_such_package_xyz\n", "needs the package 'no_such_package_xyz'"),
        ('DTYPE = "float8"\n' + KB_STYLE, "DTYPE 'float8' is not one of"),
        ('SHAPES = {"small": {"M": 4}}\n' + KB_STYLE, "sets ['M'], which are not module globals"),
        ('SHAPES = {"small": 4}\n' + KB_STYLE, "SHAPES['small'] is not a dict"),
        ('TOLERANCE = {"atol": 1}\n' + KB_STYLE, "TOLERANCE is neither"),
        ("import sys\nsys.exit(3)\n", "fails on import: SystemExit"),
    ],
)
def test_malformed_files_fail_with_one_line_naming_the_problem(write_task, source, expected):
    assert expected in _problem(write_task, source)


def test_kernelbench_style_file_without_metadata_gets_defaults(write_task):
    task = load_task(write_task(KB_STYLE, "level1/1_Square_matmul.py"))
    assert task.name == "level1/1_Square_matmul"
    assert task.dtype == torch.float32 and task.tolerance.atol == 1e-4
    assert list(task.shapes) == ["default"] and task.tags == () and task.flops() is None
    assert task.sizes()["N"] == 64
    model = task.instantiate_on_meta()
    assert isinstance(model, torch.nn.Module)
    assert task.input_numel() == 2 * 64 * 64


def test_cuda_in_get_inputs_loads_and_fails_only_when_inputs_are_drawn_without_a_gpu(write_task):
    """Decision: loading never runs get_inputs, so such a file lists and shows on a CPU-only
    machine; drawing its inputs there is a TaskLoadError naming get_inputs, not a crash."""
    task = load_task(write_task(KB_STYLE.replace("torch.rand(N, N)", "torch.rand(N, N).cuda()")))
    assert task.instantiate_on_meta() is not None
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: .cuda() succeeds")
    with pytest.raises(TaskLoadError, match=r"get_inputs\(\) fails"):
        task.make_inputs(0)


def test_constructor_reading_tensor_values_falls_back_from_meta_to_cpu(write_task):
    source = KB_STYLE.replace(
        "super(Model, self).__init__()",
        "super(Model, self).__init__()\n        self.rates = [x.item() for x in torch.linspace(0, 1, 3)]",
    )
    model = load_task(write_task(source)).instantiate_on_meta()
    assert model.rates == [0.0, 0.5, 1.0]


def test_failing_constructor_is_a_load_error(write_task):
    source = KB_STYLE.replace("super(Model, self).__init__()", "raise ValueError('bad size')")
    with pytest.raises(TaskLoadError, match=r"Model\(\.\.\.\) fails: ValueError: bad size"):
        load_task(write_task(source)).instantiate_on_meta()


def test_same_seed_same_inputs_and_weights_different_seed_differs(write_task):
    task = load_task(write_task(GOOD))
    a, b, c = task.make_inputs(1), task.make_inputs(1), task.make_inputs(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    assert a[1].dtype == torch.int64  # integer inputs keep their dtype
    w1, w2 = task.make_model(5).w, task.make_model(6).w
    assert torch.equal(w1, task.make_model(5).w) and not torch.equal(w1, w2)


def test_drawing_inputs_leaves_global_random_state_untouched(write_task):
    task = load_task(write_task(GOOD.replace(
        "return [torch.randn(3, N)", "import random\n    random.random()\n    return [torch.randn(3, N)")))
    torch.manual_seed(123)
    random.seed(123)
    expected_torch, expected_py = torch.rand(3), random.random()
    torch.manual_seed(123)
    random.seed(123)
    task.make_inputs(7)
    task.make_model(7)
    assert torch.equal(torch.rand(3), expected_torch)
    assert random.random() == expected_py


def test_inputs_are_cast_to_the_requested_dtype_except_integers(write_task):
    task = load_task(write_task(GOOD.replace('DTYPE = "float32"', 'DTYPE = "bfloat16"')))
    x, idx = task.make_inputs(0)
    assert x.dtype == torch.bfloat16 and idx.dtype == torch.int64
    assert task.make_model(0).w.dtype == torch.bfloat16
    assert task.make_inputs(0, dtype=torch.float64)[0].dtype == torch.float64


def test_shape_variant_overrides_globals_then_restores_them(write_task):
    task = load_task(write_task(GOOD))
    assert task.make_inputs(0, "odd")[0].shape == (3, 33)
    assert task.make_model(0, "small").w.shape == (4,)
    assert task.module.N == 8  # restored
    assert task.make_inputs(0)[0].shape == (3, 8)
    assert task.sizes("odd")["N"] == 33 and task.sizes()["N"] == 8
    with pytest.raises(KeyError, match="has no shape 'huge'"):
        task.make_inputs(0, "huge")
    with pytest.raises(RuntimeError), task.shape_variant("small"):
        assert task.module.N == 4
        raise RuntimeError("restored even on error")
    assert task.module.N == 8


def test_two_tasks_from_one_file_do_not_share_module_state(write_task):
    path = write_task(GOOD)
    one, two = load_task(path), load_task(path)
    with one.shape_variant("odd"):
        assert two.module.N == 8


def test_metrics_take_sizes_and_module_globals_by_name(write_task):
    task = load_task(write_task(GOOD))
    assert task.flops("small") == 12.0 and task.flops() == 24.0
    assert task.bytes_moved("odd") == 4 * 7 * 33


def test_metric_naming_an_unknown_global_is_a_load_error(write_task):
    task = load_task(write_task(GOOD.replace("def flops(N):", "def flops(N, M):")))
    with pytest.raises(TaskLoadError, match=r"flops\(\) takes \['M'\]"):
        task.flops()


def test_resolution_by_level_name_with_or_without_py_and_by_path(write_task, tmp_path):
    path = write_task(GOOD, "level2/fused_thing.py")
    for ref in ("level2/fused_thing", "level2/fused_thing.py", str(path)):
        assert resolve_task_path(ref, tmp_path) == path.resolve()
    assert task_name_for(path) == "level2/fused_thing"
    with pytest.raises(TaskLoadError, match="no such task file"):
        resolve_task_path("level2/absent", tmp_path)


def test_discover_orders_levels_and_kernelbench_numbers_naturally(write_task, tmp_path):
    for name in ("level2/1_a.py", "level10/1_z.py", "level1/10_b.py", "level1/2_c.py", "level1/_private.py"):
        write_task(KB_STYLE, f"KernelBench/{name}")
    names = [task_name_for(p) for p in discover(tmp_path)]
    assert names == ["level1/2_c", "level1/10_b", "level2/1_a", "level10/1_z"]
    assert [task_name_for(p) for p in discover(tmp_path / "KernelBench" / "level1")] == ["level1/2_c", "level1/10_b"]


def test_models_are_built_in_eval_mode_unless_training_is_asked(write_task):
    source = KB_STYLE.replace("super(Model, self).__init__()",
                              "super(Model, self).__init__()\n        self.bn = nn.BatchNorm1d(64)")
    source = source.replace("return torch.matmul(A, B)", "return self.bn(torch.matmul(A, B))")
    task = load_task(write_task(source))
    a, b = task.make_inputs(0)
    assert not task.make_model(0).training
    model = task.make_model(0, training=True)
    assert model.training
    with torch.no_grad():
        out = model(a, b)
    # Training-mode BatchNorm normalises with the batch's statistics: columns have mean ~0.
    assert out.mean(dim=0).abs().max() < 1e-4
