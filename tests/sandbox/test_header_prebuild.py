"""The parent precompiles torch/extension.h for load_inline candidates, in the background, into a
trusted tree of the build cache that sandboxed builds read and cannot write (issue 13: a cold
KernelBench build in under 10 s; the sandbox's file-size limit kept it from making its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agentforge.evaluator import build_cache
from agentforge.evaluator.cuda_emulation import build as emulation_build
from agentforge.evaluator.header_prebuild import FlagSet, flag_sets, link_prebuilt, wanted_sets
from agentforge.sandbox.process_backend import prepare_cache

REPO = Path(__file__).resolve().parent.parent.parent
CANDIDATE = REPO / "tests" / "evaluator" / "candidates" / "relu_load_inline_cpp.py"


def test_flag_sets_are_read_from_the_syntax_tree_without_running_anything() -> None:
    source = """
import torch
from torch.utils.cpp_extension import load_inline
raise SystemExit("never executed")
a = load_inline(name="a", cpp_sources=cpp, functions=["f"])
b = torch.utils.cpp_extension.load_inline("b", cpp, cuda_src, extra_cflags=["-O3"], extra_include_paths="/x")
c = load_inline(name="c", cpp_sources=cpp, cuda_sources=None, extra_cflags=FLAGS)
d = load_inline(name="d", cpp_sources=cpp, with_cuda=True)
"""
    assert flag_sets(source) == [FlagSet(), FlagSet(cflags=("-O3",), includes=("/x",), cuda=True),
                                 FlagSet(cuda=True)]
    assert flag_sets("def broken(:\n") == [] and flag_sets("x = 1\n") == []


def test_a_cuda_candidate_that_will_be_emulated_also_gets_the_emulations_header(monkeypatch) -> None:
    """Without a GPU a CUDA `load_inline` candidate is built twice over torch's header: main.cpp of
    nvcc's compile-only verdict (the CUDA flag set) and the CPU emulation's build, with flags of its
    own. The set prebuilt for the emulation is the one its build asks for."""
    source = 'm = load_inline(name="m", cpp_sources=cpp, cuda_sources=cu, extra_cflags=["-DX=1", "-O3"])\n'
    cuda = FlagSet(cflags=("-DX=1", "-O3"), cuda=True)
    assert wanted_sets(source) == [cuda]
    (emulated,) = [f for f in wanted_sets(source, emulated=True) if f != cuda]
    asked: dict = {}
    monkeypatch.setattr(emulation_build, "_CPU_BUILD", [lambda name, **kw: asked.update(kw)])
    emulation_build.load_inline_emulated("m", cpp_sources="int f();", cuda_sources="__global__ void k() {}",
                                         extra_cflags=["-DX=1", "-O3"])
    assert emulated == FlagSet(cflags=tuple(asked["extra_cflags"]), includes=tuple(asked["extra_include_paths"]),
                               cuda=bool(asked["with_cuda"]))
    assert wanted_sets(source, cuda_allowed=False, emulated=True) == []


def _store(root: Path, key: str, ready: bool = True) -> Path:
    entry = root / build_cache.TRUSTED_TREE / "pch" / key
    (entry / "torch").mkdir(parents=True)
    (entry / "torch" / "extension.h").write_text("#include_next <torch/extension.h>\n")
    (entry / "torch" / "extension.h.gch").write_bytes(b"\0" * 4096)
    if ready:
        (entry / "READY").write_text("ok\n")
    return entry


def test_prebuilt_headers_are_linked_into_a_new_cache_once_and_readable_by_the_sandbox(tmp_path: Path) -> None:
    store, cache = tmp_path / "store", tmp_path / "cache"
    built = _store(store, "a" * 24)
    _store(store, "b" * 24, ready=False)  # a build still running there is not linked
    assert link_prebuilt(str(store), str(cache)) == ["a" * 24]
    linked = cache / build_cache.TRUSTED_TREE / "pch" / ("a" * 24)
    assert (linked / "READY").is_file() and not (cache / build_cache.TRUSTED_TREE / "pch" / ("b" * 24)).exists()
    gch = linked / "torch" / "extension.h.gch"
    assert gch.stat().st_ino == (built / "torch" / "extension.h.gch").stat().st_ino  # a link, not a 800 MB copy
    assert gch.stat().st_mode & 0o777 == 0o644 and linked.stat().st_mode & 0o777 == 0o755
    assert link_prebuilt(str(store), str(cache)) == []  # already there
    assert link_prebuilt(str(cache), str(cache)) == [] and link_prebuilt(str(tmp_path / "none"), str(cache)) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the cache is chown'd to the sandbox uid only when started as root")
def test_preparing_the_cache_for_the_sandbox_leaves_the_trusted_tree_to_the_parent(tmp_path: Path) -> None:
    (tmp_path / build_cache.TRUSTED_TREE / "pch").mkdir(parents=True)
    (tmp_path / "build-uid65534").mkdir()
    prepare_cache(str(tmp_path), 65534)
    assert (tmp_path / "build-uid65534").stat().st_uid == 65534 and tmp_path.stat().st_uid == 65534
    assert (tmp_path / build_cache.TRUSTED_TREE).stat().st_uid == 0
    assert (tmp_path / build_cache.TRUSTED_TREE / "pch").stat().st_uid == 0


def _eval(cache: Path, candidate: Path, prebuild: bool, headers_from: str = "") -> dict:
    env = {**os.environ, "AGENTFORGE_CACHE_DIR": str(cache), "AGENTFORGE_SANDBOX_HEADERS_FROM": headers_from,
           "AGENTFORGE_SANDBOX_PREBUILD_HEADERS": "true" if prebuild else "false"}
    done = subprocess.run([sys.executable, "-m", "agentforge", "eval", "level1/relu", str(candidate), "--json",
                           "--backend", "cpu", "--shape", "small", "--no-compile-baseline", "--no-timing"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow  # a real header build: about 70-90 s of both cores and 2 GB
def test_the_first_eval_starts_the_header_build_and_later_cold_builds_read_it(tmp_path: Path) -> None:
    """Then a new, empty cache told to start from this one (`headers_from`) reads the same header
    at its first build, as a hard link in its own trusted tree."""
    cache = tmp_path / "cache"
    first = _eval(cache, CANDIDATE, prebuild=True)
    assert first["status"] == "ok", first["error"]
    done = cache / build_cache.TRUSTED_TREE
    deadline = time.monotonic() + 900
    while not list(done.glob(".done-*")) and time.monotonic() < deadline:
        time.sleep(2)
    notes = "".join(p.read_text() for p in done.glob(".done-*"))
    assert "extension.h.gch" in notes and "built in" in notes, (done / "prebuild.log").read_text()

    salted = tmp_path / "salted.py"  # new source text: a cold build, not a cache hit
    salted.write_text(CANDIDATE.read_text().replace("return out;", "return out;  // another build"))
    second = _eval(cache, salted, prebuild=True)
    assert second["status"] == "ok" and not second["compile"]["cached"], second["error"]
    assert "(prebuilt by the parent)" in second["compile"]["log_tail"].splitlines()[0]
    gch = next((done / "pch").glob("*/torch/extension.h.gch"))
    assert str(gch.parent.parent) in second["compile"]["log_tail"]  # g++ was given its folder
    assert gch.stat().st_mode & 0o004  # readable by the sandbox's uid
    if os.geteuid() == 0:  # the sandbox runs as another uid: it may read the tree and not write it
        assert gch.stat().st_uid == 0 and not gch.stat().st_mode & 0o022

    fresh = tmp_path / "fresh-cache"
    third = _eval(fresh, CANDIDATE, prebuild=False, headers_from=str(cache))
    assert third["status"] == "ok" and not third["compile"]["cached"], third["error"]
    assert "(prebuilt by the parent)" in third["compile"]["log_tail"].splitlines()[0]
    linked = fresh / gch.relative_to(cache)
    assert str(linked.parent.parent) in third["compile"]["log_tail"]
    assert linked.stat().st_ino == gch.stat().st_ino
