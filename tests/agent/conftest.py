"""Fixtures for the loop's tests: a tiny CPU task, and a script keyed by (role, round) so that a
resumed run gets the same answers as the first (the scripted loopback LLM server, `scripted`, is
the root conftest's)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.fixtures import modules

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def kernels() -> ModuleType:
    return modules.load("agentforge_tests_agent_kernels", HERE / "kernels.py")


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
