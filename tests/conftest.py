"""Shared test plumbing: the `gpu` marker skips cleanly without CUDA; `docker` and `postgres` tests
skip themselves (their fixtures say why) where no daemon or server can be started; the tiers
(tests/tiers.txt marks what starts processes or runs long, and `--refuse-processes` keeps the fast
tier honest: see README, Contributing)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.fixtures import modules

pytest_plugins = ["tests.fixtures.progress_clock"]

# A CLI run starts a detached build of torch's precompiled extension header (90 s of both cores,
# 2 GB) for each new build cache that meets a load_inline candidate. Tests each use a cache of their
# own, so they would start dozens: off here, on in the test of that feature.
os.environ.setdefault("AGENTFORGE_SANDBOX_PREBUILD_HEADERS", "false")
# Likewise the torch.compile baseline builder (evaluator/judge/baseline_cache.py): a detached compile per
# test's own cache, also for jobs that never reach timing; on in the tests of that feature.
os.environ.setdefault("AGENTFORGE_SANDBOX_PREBUILD_BASELINES", "false")
# Likewise a CLI run keeps a spare child (an idle interpreter with torch) for its next CPU job;
# tests/sandbox/test_spares.py turns spares on where it tests them.
os.environ.setdefault("AGENTFORGE_SANDBOX_WARM_SPARES", "0")

# Every test's build cache starts with torch's precompiled headers for the flag sets most builds use
# (`SandboxConfig.headers_from`): a user's cache has them after the parent's first background build,
# and a test's own empty cache would otherwise compile torch/extension.h in full for each load_inline
# build (about 25 s a build here; 7 s with the header). Built once per machine, in the background at
# the first run's start, into a store keyed by content like any build cache; the tests of the
# header itself (tests/sandbox/test_header_prebuild.py, tests/evaluator/test_build_speed.py) use
# caches of their own without it.
HEADERS_FROM = "AGENTFORGE_SANDBOX_HEADERS_FROM"
TEST_HEADERS = Path(tempfile.gettempdir()) / f"agentforge-test-headers-{os.geteuid()}"

REPO_ROOT = Path(__file__).resolve().parent.parent
TIERS = Path(__file__).with_name("tiers.txt")
TIER_MARKERS = ("process", "slow")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--refuse-processes", action="store_true",
                     help="fail a test that starts a process (subprocess, fork) unless it is marked `process` "
                          "or `slow` (tests/tiers.txt): how `make test-fast` stays fast")
    parser.addoption("--tiers", default=str(TIERS), help="the file that marks tests `process` or `slow` "
                                                         "(default: tests/tiers.txt)")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def read_tiers(path: Path = TIERS) -> list[tuple[str, str]]:
    """(marker, node id prefix) of each line `MARKER NODEID  # why`; a prefix is a file, a file::test
    (every parameter of it), or a file::test[param]."""
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        marker, _, prefix = text.partition(" ")
        if marker not in TIER_MARKERS or not prefix.strip():
            raise pytest.UsageError(f"{path}:{number}: write 'MARKER NODEID' with MARKER one of "
                                    f"{', '.join(TIER_MARKERS)} (got {line!r})")
        entries.append((marker, prefix.strip()))
    return entries


def _matches(nodeid: str, prefix: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "["))


def _gone(prefix: str) -> bool:
    """Whether the file, or the test (`def NAME`, `class NAME`) a line names no longer exists."""
    file, _, rest = prefix.partition("::")
    path = REPO_ROOT / file
    if not path.is_file():
        return True
    name = rest.split("[", 1)[0].split("::", 1)[0]
    text = path.read_text()
    return bool(name) and f"def {name}(" not in text and f"class {name}" not in text


def _mark_tiers(items: list[pytest.Item], path: Path, strict: bool) -> None:
    """Mark each item its lines name; a line naming a test that is gone stops a fast-tier run
    (`strict`) and is a warning elsewhere."""
    entries = read_tiers(path)
    used = [False] * len(entries)
    for item in items:
        for i, (marker, prefix) in enumerate(entries):
            if _matches(item.nodeid, prefix):
                item.add_marker(getattr(pytest.mark, marker))
                used[i] = True
    stale = [prefix for (_, prefix), hit in zip(entries, used, strict=True) if not hit and _gone(prefix)]
    if stale:
        message = f"{path} names tests that no longer exist: {', '.join(stale)}; remove or rename those lines"
        if strict:
            raise pytest.UsageError(message)
        warnings.warn(message, pytest.PytestConfigWarning, stacklevel=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_tiers(items, Path(config.getoption("--tiers")), strict=config.getoption("--refuse-processes"))
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none visible to torch)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


class ProcessRefused(RuntimeError):
    """A test of the fast tier started a process."""


_current: list[pytest.Item | None] = [None]


def _refuse(what: str) -> None:
    item = _current[0]
    if item is not None and not any(item.get_closest_marker(m) for m in TIER_MARKERS):
        raise ProcessRefused(f"{item.nodeid} starts a process ({what[:120]}), which the fast tier leaves out: "
                             f"add 'process {item.nodeid.split('[', 1)[0]}' to tests/{TIERS.name}, or test "
                             "the logic without the process")


def _learn_the_machine() -> None:
    """What is learnt once per machine or process by starting a program, learnt here, before
    processes are refused, so that no test is refused for it (or passes only when an earlier test
    happened to learn it first, as a subset run showed):
    - matplotlib lists the fonts with `fc-list` at its first use (a plot in a report);
    - which isolation works here (`isolation.probe`, cached per process; every command that
      checks its sandbox asks)."""
    with contextlib.suppress(ImportError):
        import matplotlib.font_manager  # noqa: F401 - builds and saves the cache on import
    from agentforge.sandbox import isolation

    for mode in isolation.ISOLATING_MODES:
        isolation.probe(mode)


def _start_test_headers() -> None:
    """Point every sandbox of this run at the shared header store, and start its builders (detached;
    a builder whose header is built or being built exits at once)."""
    from agentforge.evaluator import header_prebuild
    from agentforge.evaluator.header_prebuild import FlagSet
    from agentforge.evaluator.worker.compile_only import find_nvcc

    try:
        TEST_HEADERS.mkdir(mode=0o755, exist_ok=True)
        if TEST_HEADERS.lstat().st_uid != os.geteuid() or TEST_HEADERS.is_symlink():
            return  # not ours: every test compiles without it, as before
        TEST_HEADERS.chmod(0o755)
    except OSError:
        return
    os.environ[HEADERS_FROM] = str(TEST_HEADERS)
    sets = [FlagSet()]
    if find_nvcc() is not None:  # compile-only CUDA verdicts' main.cpp, and the emulation's build
        sets += [FlagSet(cuda=True), header_prebuild.emulation_flag_set(FlagSet(cuda=True))]
    header_prebuild.prebuild(str(TEST_HEADERS), sets)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--refuse-processes"):
        if not hasattr(config, "workerinput") and HEADERS_FROM not in os.environ:  # xdist's controller, once
            _start_test_headers()
        return
    _learn_the_machine()
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    fork = os.fork

    def guarded_execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> Any:
        _refuse(str(args))
        return execute_child(self, args, *rest, **kw)

    def guarded_fork() -> int:
        _refuse("os.fork")
        return fork()

    subprocess.Popen._execute_child = guarded_execute_child  # type: ignore[attr-defined]
    os.fork = guarded_fork


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current[0] = item
    try:
        return (yield)
    finally:
        _current[0] = None


def quiet_sandbox() -> dict[str, Any]:
    return {"warm_spares": 0, "prebuild_headers": False, "prebuild_baselines": False,
            "headers_from": os.environ.get(HEADERS_FROM, "")}


@pytest.fixture(autouse=True)
def _quiet_sandbox_defaults(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `Settings()` made in a test (not read from this environment) gets no spare child, no
    header or baseline prebuild, and the shared headers (`HEADERS_FROM`): each test has folders of
    its own, where a spare is never reused and a background build (90 s of both cores for the
    header) outlives its test and slows the next ones. Tests marked `user_defaults` get a user's
    defaults (tests/fixtures/sandbox.py does the same for a `SandboxConfig` a test makes)."""
    if request.node.get_closest_marker("user_defaults"):
        return
    from agentforge.sandbox import config

    users = config.default_of
    quiet = quiet_sandbox()
    monkeypatch.setattr(config, "default_of", lambda name: quiet.get(name, users(name)))


@pytest.fixture(scope="session")
def scripted() -> ModuleType:
    """The scripted loopback LLM server module (tests/llm/scripted_server.py), for llm/ and agent/."""
    return modules.scripted_server()


@pytest.fixture(scope="session")
def shared_cache() -> Iterator[str]:
    """One build cache for the whole session, for tests that build the same sources and are not
    about a cold build: builds are keyed by content, so a source built once is served to every later
    test. Outside pytest's 0700 folders and world-writable: as root the sandbox child drops to nobody."""
    path = tempfile.mkdtemp(prefix="agentforge-test-cache-")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tasks_root() -> Path:
    return REPO_ROOT / "tasks"
