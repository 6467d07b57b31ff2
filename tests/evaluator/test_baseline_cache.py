"""torch.compile baselines compiled once by a builder that never sees candidate code, into the
trusted tree, and read by the judge from a private copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from agentforge.evaluator.judge import baseline_cache
from agentforge.evaluator.result import EvalJob, Measure

TASK = '''import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0
N = 4096
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
'''


def _spec(**changes: object) -> baseline_cache.BaselineSpec:
    spec = baseline_cache.BaselineSpec("t/relu2", TASK, "default", ("default",), "cpu", 1)
    return replace(spec, **changes)


def test_the_key_follows_everything_a_compiled_baseline_depends_on() -> None:
    keys = {_spec().key(), _spec(task_source=TASK + "\n# edited").key(), _spec(shape="small").key(),
            _spec(modes=("default", "max-autotune")).key(), _spec(device="cuda").key(), _spec(cpu_threads=2).key()}
    assert len(keys) == 6
    assert baseline_cache.BaselineSpec.from_json(_spec().to_json()) == _spec()


def test_the_parent_keys_the_job_as_the_judge_will() -> None:
    job = EvalJob(task_name="t/relu2", task_source=TASK, candidate_source="", backend="cpu", device="cpu",
                  shapes=("cpu", "small"), timing_shape="cpu", cpu_threads=1)
    spec = baseline_cache.spec_for_job(job, has_gpu=False)
    assert spec is not None and spec.shape == "cpu" and spec.modes == ("default",)  # no max-autotune on a CPU
    assert baseline_cache.spec_for_job(replace(job, measure=Measure(timing=False)), False) is None
    assert baseline_cache.spec_for_job(replace(job, measure=Measure(baselines=("eager",))), False) is None
    # CUDA source on a machine without a GPU: built and emulated, never timed
    assert baseline_cache.spec_for_job(replace(job, backend="cuda", device="auto"), False) is None


def _judge_compile(cache: Path, spec: baseline_cache.BaselineSpec) -> dict[str, object]:
    """Compile as the judge does, in a fresh process; what Inductor's FX graph cache said."""
    code = f'''
import json, sys, torch
from agentforge.evaluator.judge import baseline_cache
from agentforge.evaluator.judge.stage_timing import _compiled
from agentforge.task import Task
spec = baseline_cache.BaselineSpec.from_json({spec.to_json()!r})
task = Task(spec.task_name, spec.task_source)
with baseline_cache.judge_cache_dir({str(cache)!r}, spec, wait_s=0.0) as info, torch.no_grad():
    from agentforge.evaluator.numerics import numeric_switches
    with numeric_switches(True):
        torch.set_num_threads(1)
        from agentforge.evaluator.models import set_mode
        ref = set_mode(task.make_model(5, spec.shape))
        _compiled(ref, "default")(*task.make_inputs(6, spec.shape))
    folder = info.folder
from torch._dynamo.utils import counters
print(json.dumps({{"source": info.source, "hits": counters["inductor"]["fxgraph_cache_hit"],
                  "folder_left": folder.exists()}}))
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_built_entry_answers_the_judges_compile_from_a_private_copy(tmp_path: Path) -> None:
    spec = _spec()
    with baseline_cache.judge_cache_dir(tmp_path, spec, wait_s=0.0) as cold:
        assert cold.source == "cold" and "not built yet" in cold.note
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cold.folder)
    assert not cold.folder.exists() and os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(cold.folder)

    # The builder as the parent starts it: a process of its own (in this one, an earlier compile of
    # the same graph would answer from memory and leave nothing on disk).
    built = subprocess.run([sys.executable, "-m", "agentforge.evaluator.judge.baseline_cache", "--cache", str(tmp_path),
                            "--spec", spec.to_json()], capture_output=True, text=True, timeout=600)
    assert "built in" in built.stdout, built.stdout + built.stderr
    entry = baseline_cache.entry(tmp_path, spec)
    assert entry.ready
    modes = {p.stat().st_mode & 0o777 for p in entry.folder.rglob("*")}
    assert modes <= {0o755, 0o644}  # readable by the sandbox uid, writable by the builder alone
    assert baseline_cache.build(str(tmp_path), spec).endswith("ready")  # built once

    warm = _judge_compile(tmp_path, spec)
    assert warm["source"] == "judge-cache" and warm["hits"] >= 1 and not warm["folder_left"]


def test_a_shape_too_large_for_the_cpu_is_not_built_outside_the_sandbox(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseline_cache, "CPU_MAX_ELEMENTS", 100)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/the/callers/own")
    note = baseline_cache.build(str(tmp_path), _spec())
    assert "failed" in note and "not compiled outside the sandbox" in note
    # the caller's setting is back (a leftover sent a later process to a removed, or closed, folder)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/the/callers/own"
    assert not baseline_cache.entry(tmp_path, _spec()).ready
    assert not baseline_cache.start(str(tmp_path), _spec())  # a failed key is not retried at every job
    assert os.listdir(tmp_path / "trusted" / "inductor")


POISONER = '''
import ctypes, os, pathlib
import torch
from torch import nn
from agentforge.evaluator.native import load_cpp

TREE = pathlib.Path(CACHE) / "trusted"  # an adversary that read the evaluator knows where it is
TRIED = []


def _poison():
    """What a candidate would do to spoil the baseline: plant, overwrite and delete in the judge's
    compile cache and the probe cache (all refused: the trusted tree is not the worker's)."""
    for target in [TREE / "inductor" / "planted", TREE / "probes" / "planted.json", *TREE.rglob("*")]:
        for attempt in (lambda p: p.write_text("x"), lambda p: p.unlink(), lambda p: p.mkdir(parents=True)):
            try:
                attempt(target)
                TRIED.append(f"changed {target}")
            except OSError:
                pass


_poison()
_lib = load_cpp("relu_cache_poison", r"""
extern "C" void relu(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}""", openmp=False)
_lib.relu.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]


class ModelNew(nn.Module):
    def forward(self, x):
        _poison()
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu(x.data_ptr(), y.data_ptr(), x.numel())
        return y
'''


def _tree_state(root: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*")) if ".lock" not in p.name and not p.name.endswith(".log")}


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's own uid (uid 65534) needs a root parent")
def test_a_candidate_cannot_write_the_judges_caches(tmp_path: Path) -> None:
    """A real sandboxed evaluation whose candidate tries, at load and in every call, to plant,
    overwrite and delete files in the trusted tree (the compiled baselines and the task probes): the
    tree is unchanged and the torch.compile baseline is timed, from the judge's cache."""
    from agentforge.sandbox import SandboxConfig

    from agentforge.candidate import Candidate
    from agentforge.evaluation import evaluate, make_job
    from agentforge.task import load_task

    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    task = load_task("level1/relu")
    source = POISONER.replace("CACHE", repr(str(cache)), 1)
    job = make_job(task, Candidate(source, "cpu"), device="cpu", cache_dir=str(cache))
    spec = baseline_cache.spec_for_job(job, has_gpu=False)
    assert spec is not None
    built = subprocess.run([sys.executable, "-m", "agentforge.evaluator.judge.baseline_cache", "--cache", str(cache),
                            "--spec", spec.to_json()], capture_output=True, text=True, timeout=600)
    assert "built in" in built.stdout, built.stdout + built.stderr  # as the parent's builder would
    before = _tree_state(cache / "trusted")
    result = evaluate(job, SandboxConfig(cache_dir=str(cache), timeout_s=600, warm_spares=0))
    assert _tree_state(cache / "trusted") == before
    assert result.accepted, result.summary()
    assert "compile-default" in result.timing.baselines and not result.timing.missing_baselines
    assert any("from the judge's cache" in n for n in result.timing.notes)
    assert result.provenance.stage_seconds["baselines_compile"] > 0
