"""A trainer's side of the reward server (reward_server.py): the same `score` as a RewardService.

`RewardClient(url)` posts completions to a server started with `agentforge rl serve-rewards` and
returns `RewardRecord`s, so `ServiceReward(RewardClient(url), ...)` rewards a TRL run (or any
trainer) from another process or machine. `score_replies` also returns, per completion, whether
its evaluation timed out and the server's explanation. Standard library only (urllib).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agentforge.rl.records import RewardRecord
from agentforge.rl.service import RewardRequest


class RewardServerError(RuntimeError):
    """The server refused the call or could not be reached; the message says which and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ScoredReply:
    record: RewardRecord
    timed_out: bool
    detail: str  # why the reward is what it is, when the server says (a timeout)


class RewardClient:
    """HTTP client of one reward server; thread-safe (a connection per call)."""

    def __init__(self, url: str, timeout_s: float = 3600.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s  # the whole call: queueing and every evaluation in it

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def score_replies(self, requests: Sequence[RewardRequest]) -> list[ScoredReply]:
        body = {"requests": [_request_json(r) for r in requests]}
        results = self._call("POST", "/score", body)["results"]
        return [ScoredReply(record_from_dict(r["record"]), bool(r["timed_out"]), r.get("detail", ""))
                for r in results]

    def score_sync(self, requests: Sequence[RewardRequest]) -> list[RewardRecord]:
        return [reply.record for reply in self.score_replies(requests)]

    async def score(self, requests: Sequence[RewardRequest]) -> list[RewardRecord]:
        """RewardService's coroutine: the HTTP call on a worker thread, the loop left free."""
        return await asyncio.to_thread(self.score_sync, requests)

    async def score_one(self, request: RewardRequest) -> RewardRecord:
        return (await self.score([request]))[0]

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RewardServerError(f"reward server {self.url} refused {method} {path} "
                                    f"({exc.code}): {_error_text(exc)}", exc.code) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RewardServerError(f"cannot reach the reward server at {self.url}: {reason} "
                                    "(is `agentforge rl serve-rewards` running there?)") from exc


def _request_json(request: RewardRequest) -> dict[str, Any]:
    data = asdict(request)
    return {k: v for k, v in data.items() if v is not None}


def record_from_dict(data: dict[str, Any]) -> RewardRecord:
    return RewardRecord(**{**data, "flags": tuple(data.get("flags", ()))})


def _error_text(exc: urllib.error.HTTPError) -> str:
    raw = exc.read()
    try:
        return str(json.loads(raw)["error"])
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")[:500] or exc.reason
