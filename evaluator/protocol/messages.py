"""The protocol's failures and the evidence pairs a reply may carry, as the judge reads them.

A reply that breaks the protocol is a `WorkerBroken` (nothing the worker says from then on is
heard); a reply saying the candidate raised is a `CandidateRaised`, with the worker's error record
as data."""

from __future__ import annotations

from typing import Any

from agentforge.evaluator.result import ErrorRecord

MAX_EVIDENCE_ITEMS = 200


class WorkerBroken(RuntimeError):
    """The worker died, or broke the protocol: nothing it says from now on is heard. `signal`: the
    signal that killed it, when one did (a crash of the candidate's code, reported as such)."""

    def __init__(self, message: str, signal: int | None = None, stderr_tail: str = ""):
        super().__init__(message)
        self.signal = signal


class CandidateRaised(RuntimeError):
    """The candidate's code raised while serving a request."""

    def __init__(self, record: ErrorRecord):
        super().__init__(record.message)
        self.record = record


def error_record(raw: Any) -> ErrorRecord:
    if not isinstance(raw, dict):
        return ErrorRecord(type="WorkerError", message="the worker sent a malformed error")

    def text(key: str, limit: int) -> str:
        value = raw.get(key, "")
        return value[:limit] if isinstance(value, str) else ""

    return ErrorRecord(type=text("type", 100) or "WorkerError", message=text("message", 2000),
                       traceback_tail=text("traceback_tail", 4000))


def evidence_items(raw: Any) -> list[tuple[str, str]]:
    """(rule, evidence) pairs from a reply; anything else in the list is dropped."""
    if not isinstance(raw, list):
        raise WorkerBroken("evidence is not a list")
    items = []
    for item in raw[:MAX_EVIDENCE_ITEMS]:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
            items.append((item[0][:64], item[1][:1000]))
    return items
