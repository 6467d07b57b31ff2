"""The one protocol every LLM back end implements: messages in, text plus usage and cost out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant
    content: str


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
        )


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    retries: int = 0  # rate-limit / server-error retries this call needed


class ProviderError(RuntimeError):
    """A provider call that failed for good (after its retries); the message says why."""


class ProviderUnavailable(ProviderError):
    """The server could not be reached or kept failing (connection errors, 5xx, rate limits)
    through every retry: not a configuration mistake, so trying again later may work."""


@runtime_checkable
class Provider(Protocol):
    name: str

    def complete(
        self, messages: list[Message], *, model: str | None = None, role: str = "coder",
        max_tokens: int | None = None, temperature: float | None = None,
    ) -> Completion:
        """One chat completion. `role` is coder or judge (the provider picks that role's model
        when `model` is None)."""
        ...
