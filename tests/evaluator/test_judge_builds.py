"""The judge's builds (issue 31, item 4): a real control worker builds, the judge stores and hashes the
artifact, and only what it handed out counts as the candidate's own code.

The end-to-end path (a candidate's `load_cpp` through the real sandbox, its verdict, and a library the
worker wrote itself caught) is in tests/exploits (`worker_built_fast_math`) and
tests/sandbox/test_control_worker.py."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentforge.evaluator import build_cache, integrity, native
from agentforge.evaluator.judge.judge_builds import JudgeBuilds
from agentforge.evaluator.judge.native_sampler import NativeSampler
from agentforge.evaluator.protocol.messages import Build

ADD_ONE = 'extern "C" int add_one(int x) { return x + 1; }'


@pytest.fixture
def control(tmp_path: Path) -> Iterator[object]:
    """A real worker process, set up as the judge's control is (never given candidate code)."""
    from agentforge.sandbox.worker import launch_worker

    client = launch_worker()
    try:
        client.setup(workdir=str(tmp_path), cache_dir=str(tmp_path / "cache"), cpu_threads=1, device="cpu",
                     torch_switches=True, sampled=False)
        yield client
    finally:
        client.close()


def _recording_judge(builds: JudgeBuilds) -> tuple[list[Build], object]:
    """The worker's channel to its judge, served by `builds`, and the list of what it was asked."""
    asked: list[Build] = []

    def judge(build: Build) -> dict[str, object]:
        asked.append(build)
        return builds.serve({"op": "build", **build.to_fields()})

    return asked, judge


def _ask(kind: str, name: str, sources: list[str], **fields: object) -> dict[str, object]:
    return {"id": 7, "op": "build", **Build(kind, name, sources, **fields).to_fields()}


def test_the_control_builds_the_judge_stores_hashes_and_serves_it_again_from_its_store(control, tmp_path) -> None:
    builds, why = JudgeBuilds.open(control, tmp_path / "cache")
    assert builds is not None, why
    first = builds.serve(_ask("lean-cpp", "add_one", [ADD_ONE], openmp=False))
    assert first["ok"] is True and first["cached"] is False, first
    path = Path(str(first["path"]))
    assert path.parent.parent.parent == tmp_path / "cache" / build_cache.JUDGE_STORE
    assert ctypes.CDLL(str(path)).add_one(41) == 42  # the artifact is the source's, built
    assert builds.served[0].sha256 in builds.artifacts and builds.artifacts[builds.served[0].sha256] == str(path)
    assert "g++" in str(first["log"]) and "-O3" in str(first["log"])
    assert not path.stat().st_mode & 0o022 and not path.parent.stat().st_mode & 0o022  # the judge's alone

    again = builds.serve(_ask("lean-cpp", "add_one", [ADD_ONE], openmp=False))
    assert again["ok"] is True and again["cached"] is True and again["path"] == str(path)


def test_a_build_that_fails_or_is_refused_says_why_and_the_next_one_is_served(control, tmp_path) -> None:
    builds, _ = JudgeBuilds.open(control, tmp_path / "cache")
    assert builds is not None
    broken = builds.serve(_ask("lean-cpp", "broken", ['extern "C" int f() { return missing; }']))
    assert broken["ok"] is False and "g++ failed to build broken" in str(broken["error"])
    assert "missing" in str(broken["log"])
    fast = builds.serve(_ask("lean-cpp", "fast", [ADD_ONE], extra_cflags=["-O2 -ffast-math"]))
    assert fast["ok"] is False and "forbidden compiler flags" in str(fast["error"])
    assert builds.serve(_ask("lean-cpp", "../escape", [ADD_ONE]))["error"].startswith("the build's name")
    assert "no such build kind" in str(builds.serve(_ask("nvcc", "k", [ADD_ONE]))["error"])
    malformed = builds.serve({"op": "build", "kind": "lean-cpp", "name": "k", "sources": "not a list"})
    assert malformed["ok"] is False and "malformed build request" in str(malformed["error"])
    # The judge's own record of what it was asked: the build rules read it, not the worker's report.
    rules = {f.rule for f in integrity.build_findings(builds.served)}
    assert "fast_math" in rules
    assert builds.serve(_ask("lean-cpp", "add_one", [ADD_ONE], openmp=False))["ok"] is True
    builds.close("the worker is sealed for timing")
    sealed = builds.serve(_ask("lean-cpp", "add_one", [ADD_ONE], openmp=False))
    assert sealed["ok"] is False and "sealed for timing" in str(sealed["error"])


def test_a_store_anyone_else_may_write_is_not_used_and_the_parent_makes_a_new_one(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    store = cache / build_cache.JUDGE_STORE
    store.mkdir(parents=True)
    store.chmod(0o777)
    builds, why = JudgeBuilds.open(None, cache)
    assert builds is None and "is not the judge's alone" in why
    planted = store / "lean-cpp" / "k"
    planted.mkdir(parents=True)
    (planted / "artifact.so").write_bytes(b"foreign")
    store.rename(tmp_path / "moved")
    store.symlink_to(tmp_path / "moved")  # a candidate's swap: a link to a folder of its own
    build_cache.prepare_store(cache, None)
    assert not store.is_symlink() and store.is_dir() and not any(store.iterdir())
    assert not store.stat().st_mode & 0o022
    assert JudgeBuilds.open(None, cache)[0] is not None


def test_only_a_file_whose_content_the_judge_handed_out_counts_as_own(control, tmp_path) -> None:
    builds, _ = JudgeBuilds.open(control, tmp_path / "cache")
    assert builds is not None
    path = Path(str(builds.serve(_ask("lean-cpp", "add_one", [ADD_ONE], openmp=False))["path"]))
    sampler = NativeSampler(os.getpid(), [])
    sampler.set_judge_builds(builds)
    assert sampler.own_roots == (str(builds.store),)
    assert sampler._judge_built(os.getpid(), str(path))
    copy = tmp_path / "copy.so"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte changed: not what the judge built
    copy.write_bytes(bytes(data))
    assert not sampler._judge_built(os.getpid(), str(copy))


def test_samples_in_code_the_judge_did_not_build_are_a_library_fallback() -> None:
    report = {"available": True, "own_by": "judge_builds", "requests": {"timed": 40, "null": 20},
              "samples": {"timed": {"own": 10, "other": 60}, "null": {}},
              "other_files": {"/cache/build-uid65534/lean-cpp/k/kernel.so": 60}}
    found, _ = integrity.native_sampling_findings(report)
    assert [f.rule for f in found] == ["library_fallback"]
    assert "code the judge did not build" in found[0].evidence and "kernel.so x60" in found[0].evidence
    by_place = {**report, "own_by": "build_cache_path"}  # where the worker built: no such rule
    assert integrity.native_sampling_findings(by_place)[0] == []
    few = {**report, "samples": {"timed": {"own": 400, "other": 20}}}
    assert integrity.native_sampling_findings(few)[0] == []


def test_load_cpp_asks_the_judge_and_loads_what_it_is_handed(control, tmp_path) -> None:
    builds, _ = JudgeBuilds.open(control, tmp_path / "cache")
    assert builds is not None
    asked, judge = _recording_judge(builds)

    before = len(native.BUILD_EVENTS)
    native.set_judge_builder(judge)
    try:
        lib = native.load_cpp("add_one", ADD_ONE, openmp=False)
        with pytest.raises(native.BuildError, match="g\\+\\+ failed"):
            native.load_cpp("broken", 'extern "C" int f() { return missing; }')
    finally:
        native.set_judge_builder(None)
    assert lib.add_one(1) == 2 and lib._name.startswith(str(builds.store))
    assert [b.name for b in asked] == ["add_one", "broken"]
    events = native.BUILD_EVENTS[before:]
    assert [(e.kind, e.ok) for e in events] == [("lean-cpp", True), ("lean-cpp", False)]
    assert "missing" in events[1].log


@pytest.mark.skipif(os.geteuid() != 0, reason="the store is given to the judge's uid only when started as root")
def test_the_parent_gives_the_store_to_the_judges_uid_and_the_sandbox_cannot_take_it(tmp_path: Path) -> None:
    from agentforge.sandbox.isolation import judge_uid
    from agentforge.sandbox.process_backend import prepare_cache

    cache = tmp_path / "cache"
    build_cache.prepare_store(cache, judge_uid(65534))
    prepare_cache(str(cache), 65534)  # the sandbox's uid takes the cache, not the judge's store in it
    store = cache / build_cache.JUDGE_STORE
    assert cache.stat().st_uid == 65534 and store.stat().st_uid == judge_uid(65534) != 65534
    os.chown(store, 65534, 65534)  # as a candidate's swap would leave it
    build_cache.prepare_store(cache, judge_uid(65534))
    assert store.stat().st_uid == judge_uid(65534) and not store.stat().st_mode & 0o022


def test_where_the_worker_shares_the_judges_uid_nothing_stored_is_served_again(control, tmp_path) -> None:
    """Started without root the worker runs as the judge's uid and could plant an artifact at a key it
    can compute: every build is then made afresh, and what counts is the hash of the bytes built."""
    builds, _ = JudgeBuilds.open(control, tmp_path / "cache")
    assert builds is not None
    builds.reuse = False
    first = builds.serve(_ask("lean-cpp", "add_one", [ADD_ONE], openmp=False))
    second = builds.serve(_ask("lean-cpp", "add_one", [ADD_ONE], openmp=False))
    assert first["ok"] is True and second["ok"] is True and first["path"] != second["path"]
    assert first["cached"] is False and second["cached"] is False
    path = Path(str(first["path"]))
    built = builds.served[0].sha256
    sampler = NativeSampler(os.getpid(), [])
    sampler.set_judge_builds(builds)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))  # changed after the judge handed it out
    assert built in builds.artifacts and not sampler._judge_built(os.getpid(), str(path))


# Reads no torch header, and cannot: with torch/extension.h above it, `at::Tensor` is redeclared.
NO_TORCH = 'namespace at { int Tensor = 0; }\nextern "C" int add_two(int x) { return x + 2 + at::Tensor; }'


def test_a_load_inline_without_implicit_headers_is_built_by_the_judge_as_asked(control, tmp_path) -> None:
    """`no_implicit_headers` travels to the judge's build: it was dropped on the way, so the judge
    compiled this source under torch's header, where it cannot build."""
    builds, _ = JudgeBuilds.open(control, tmp_path / "cache")
    assert builds is not None
    asked, judge = _recording_judge(builds)

    native.set_judge_builder(judge)
    try:
        lib = native.cached_load_inline("no_torch", cpp_sources=NO_TORCH, is_python_module=False,
                                        no_implicit_headers=True)
    finally:
        native.set_judge_builder(None)
    assert isinstance(lib, str) and lib.startswith(str(builds.store))  # not a Python module: its path
    assert ctypes.CDLL(lib).add_two(40) == 42
    assert asked[0].no_implicit_headers is True and asked[0].with_pytorch_error_handling is True
    event = native.BUILD_EVENTS[-1]
    assert event.ok and event.pch.startswith("none: main.cpp does not include"), event.pch


def test_load_inline_options_that_change_the_build_are_in_its_key() -> None:
    plain = native.inline_key([ADD_ONE], [], None, [])
    assert native.inline_key([ADD_ONE], [], None, [], native.inline_options(no_implicit_headers=False)) == plain
    lean = native.inline_key([ADD_ONE], [], None, [], native.inline_options(no_implicit_headers=True))
    bare = native.inline_key([ADD_ONE], [], None, [], native.inline_options(with_pytorch_error_handling=False))
    assert len({plain, lean, bare}) == 3
