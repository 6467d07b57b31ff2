"""A cold KernelBench `load_inline` C++ build reads a precompiled torch/extension.h from the build
cache: real g++, real torch builds, no fakes. The figures are `benchmarks/build_speed.py`'s; here,
that the header is built once, really read by g++ (ninja's record of main.o's inputs names it),
leaves the kernel right, and cuts the compiler's work."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from agentforge.evaluator import build_cache, native

REPO = Path(__file__).resolve().parent.parent.parent
SOURCE = (Path(__file__).resolve().parent / "candidates" / "relu_load_inline_cpp.py").read_text()
CPP = SOURCE.split('cpp_source = r"""')[1].split('"""')[0]

UNDER_A_FILE_LIMIT = """
import resource, sys, tempfile
from pathlib import Path
resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
from agentforge.evaluator import build_cache
from agentforge.evaluator import native
build_cache.set_cache_root(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    plan = native.torch_build_plan(Path(tmp), "probe", [Path(tmp) / "main.cpp"])
    print(native.extension_pch(plan)[1])
"""


@pytest.fixture(scope="module")
def cache_with_header(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("pch-cache")
    build_cache.set_cache_root(root)
    yield root
    build_cache.set_cache_root(None)
    shutil.rmtree(root, ignore_errors=True)  # the header alone is most of a gigabyte


def test_the_torch_build_plan_is_what_torch_writes(tmp_path: Path) -> None:
    from torch.utils import cpp_extension

    plan = native.torch_build_plan(tmp_path, "probe", [tmp_path / "main.cpp", tmp_path / "cuda.cu"], with_cuda=True,
                                   extra_cuda_cflags=["-gencode=arch=compute_90a,code=sm_90a"], cuda_home="/opt/cuda")
    cflags, cuda_cflags = plan.words("cflags"), plan.words("cuda_cflags")
    assert "-DTORCH_EXTENSION_NAME=probe" in cflags and "-DTORCH_API_INCLUDE_EXTENSION_H" in cflags
    assert any(f.startswith("-std=c++") for f in cflags) and "-fPIC" in cflags
    assert all(f in cuda_cflags for f in cpp_extension.COMMON_NVCC_FLAGS)
    assert any(f.startswith("-std=c++") for f in cuda_cflags)
    assert plan.objects == {"main.o": "compile", "cuda.cuda.o": "cuda_compile"}
    assert cpp_extension.CUDA_HOME is None or cpp_extension.CUDA_HOME != "/opt/cuda"  # restored


def test_no_header_is_tried_where_the_file_size_limit_forbids_it(tmp_path: Path) -> None:
    """The sandbox limits file size (512 MiB by default); the header is about 0.8 GB, so a minute of
    compiling would end in EFBIG: the build goes on without one, at once."""
    done = subprocess.run([sys.executable, "-c", UNDER_A_FILE_LIMIT, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no precompiled header: the file size limit (512 MiB)" in done.stdout
    assert not (tmp_path / f"build-uid{os.geteuid()}" / "pch").exists()


@pytest.mark.slow
def test_a_cold_build_reads_the_precompiled_header_and_the_kernel_is_right(cache_with_header: Path) -> None:
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and limit < native.PCH_MIN_FILE_LIMIT:
        pytest.skip("this process may not write a file as large as the header")
    folder, note = native.prepare_extension_pch()
    assert folder is not None, note
    gch = folder / "torch" / "extension.h.gch"
    assert gch.stat().st_size > 100 << 20
    assert native.prepare_extension_pch()[0] == folder  # built once

    module = native.cached_load_inline("relu_pch", cpp_sources=CPP, functions=["relu_forward"])
    event = native.BUILD_EVENTS[-1]
    assert event.ok and not event.cached and event.pch == str(gch)
    target = _built_folder(cache_with_header)
    # What g++ read for main.o (ninja's record of its -MMD output): with the .gch, the header's name
    # in the cache folder and nothing of torch's include tree; without it, hundreds of torch headers.
    deps = subprocess.run(["ninja", "-t", "deps", "main.o"], cwd=target, capture_output=True, text=True).stdout
    assert str(folder / "torch" / "extension.h") in deps
    assert "torch/include/" not in deps, deps[:2000]
    x = torch.randn(4, 33)
    x[0, 0] = float("nan")
    assert torch.equal(module.relu_forward(x).nan_to_num(7.0), torch.relu(x).nan_to_num(7.0))


def _built_folder(root: Path) -> Path:
    """The one build folder of the cache (its key locks sit beside it, named with a dot)."""
    folders = [p for p in (root / f"build-uid{os.geteuid()}" / "load_inline").iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1, folders
    return folders[0]


LOAD_AGAIN = """
import sys
from agentforge.evaluator import build_cache
from agentforge.evaluator import native
build_cache.set_cache_root(sys.argv[1])
module = native.cached_load_inline("relu_pch", cpp_sources=sys.argv[2], functions=["relu_forward"])
print("loaded", native.BUILD_EVENTS[-1].cached)
"""


@pytest.mark.slow  # a real build (or the one before it in this module), then a fresh process loads it
def test_a_build_killed_midway_leaves_no_lock_that_stops_the_next(cache_with_header: Path) -> None:
    """torch's build `lock` (its FileBaton) outlives a build killed at the sandbox's time limit, and
    torch then waits on it forever: every later load of the same source hung until its own limit."""
    native.cached_load_inline("relu_pch", cpp_sources=CPP, functions=["relu_forward"])
    target = _built_folder(cache_with_header)
    (target / "lock").write_text("")  # what a killed build leaves
    done = subprocess.run([sys.executable, "-c", LOAD_AGAIN, str(cache_with_header), CPP], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["loaded", "True"], done.stderr[-2000:]
    assert not (target / "lock").exists()


@pytest.mark.slow
def test_with_the_header_a_cold_build_costs_a_fraction_of_torchs_own(cache_with_header: Path) -> None:
    """Compiler CPU seconds, not wall time: the machine is shared, and CPU time barely moves with load."""
    native.prepare_extension_pch()
    runs = {}
    for mode in ("torch_load_inline", "cold_pch_warm"):
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "build_speed.py"), "--one", mode,
                               str(cache_with_header), f"test_{mode}"], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    assert runs["cold_pch_warm"]["pch"].endswith("extension.h.gch")
    assert runs["cold_pch_warm"]["compiler_cpu_s"] < 0.6 * runs["torch_load_inline"]["compiler_cpu_s"], runs


def test_past_four_headers_a_new_flag_set_builds_without_one(tmp_path: Path) -> None:
    """Each flag set has its own header of most of a gigabyte: the cache keeps at most four."""
    build_cache.set_cache_root(tmp_path)
    try:
        for n in range(native.PCH_MAX_HEADERS):  # four finished headers of other flag sets
            (build_cache.entry("pch", f"other{n}").folder).mkdir(parents=True)
            (build_cache.entry("pch", f"other{n}").folder / "READY").write_text("ok\n")
        plan = native.torch_build_plan(tmp_path, "probe", [tmp_path / "main.cpp"], extra_cflags=["-O3"])
        folder, note = native.extension_pch(plan)
    finally:
        build_cache.set_cache_root(None)
    assert folder is None and "holds 4" in note


def test_a_build_whose_main_cpp_reads_no_torch_header_builds_no_header(tmp_path: Path) -> None:
    """`no_implicit_headers` and no `#include <torch/extension.h>` of its own: main.cpp never reads the
    header, so none is built for it (a minute of g++ that a lean source waited for, for nothing)."""
    build_cache.set_cache_root(tmp_path)
    try:
        library = native.cached_load_inline("no_header", cpp_sources='extern "C" int answer() { return 42; }',
                                            no_implicit_headers=True, is_python_module=False)
    finally:
        build_cache.set_cache_root(None)
    event = native.BUILD_EVENTS[-1]
    assert event.ok and event.pch == "none: main.cpp does not include torch/extension.h", event
    assert not (tmp_path / f"build-uid{os.geteuid()}" / "pch").exists()
    assert ctypes.CDLL(library).answer() == 42
