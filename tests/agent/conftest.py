"""Fixtures for the loop's tests: the scripted loopback LLM server, a tiny CPU task, and a
script keyed by (role, round) so that a resumed run gets the same answers as the first."""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def scripted() -> ModuleType:
    return _load("agentforge_tests_scripted_server", HERE.parent / "llm" / "scripted_server.py")


@pytest.fixture(scope="session")
def kernels() -> ModuleType:
    return _load("agentforge_tests_agent_kernels", HERE / "kernels.py")


@pytest.fixture
def relu_task(tmp_path: Path, kernels: ModuleType) -> Path:
    path = tmp_path / "relu_task.py"
    path.write_text(kernels.TASK)
    return path


_ROUND = re.compile(r"^Round: (\d+)", re.M)


def role_and_round(api: str, body: dict[str, Any]) -> tuple[str, int]:
    messages = body.get("messages", [])
    system = body.get("system") or "".join(m["content"] for m in messages if m["role"] == "system")
    user = "".join(m["content"] for m in messages if m["role"] == "user")
    role = "judge" if "You are the judge" in system else "coder"
    match = _ROUND.search(user)
    return role, int(match.group(1)) if match else -1


class RoundScript:
    """Replies by (role, round), each key's list served in order, its last reply repeated."""

    def __init__(self, scripted: ModuleType, replies: dict[tuple[str, int], list[Any]]):
        self.scripted = scripted
        self.replies = {k: list(v) for k, v in replies.items()}
        self.served: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, api: str, body: dict[str, Any]) -> Any:
        key = role_and_round(api, body)
        with self.lock:
            queue = self.replies.get(key)
            if not queue:
                reply = self.scripted.Reply(f"no scripted reply for {key}")
            else:
                reply = queue.pop(0) if len(queue) > 1 else queue[0]
            self.served.append((*key, reply.status))
        return reply


@pytest.fixture
def round_script(scripted: ModuleType) -> Callable[[dict[tuple[str, int], list[Any]]], RoundScript]:
    return lambda replies: RoundScript(scripted, replies)
