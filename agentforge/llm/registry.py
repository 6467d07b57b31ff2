"""One registry of LLM providers: `make_provider(settings.provider, ...)` by name."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from agentforge.llm.base import Provider
from agentforge.llm.pricing import PriceTable, load_price_table
from agentforge.settings import ProviderSettings, SettingsError

PROVIDERS = ("openai", "anthropic", "library")


def make_provider(
    settings: ProviderSettings, *, task_name: str | None = None, backend: str | None = None,
    gpu: str | None = None, kernels_root: Path | None = None, prices: PriceTable | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Provider:
    """The provider named by `settings.name` (`auto` here means no key was found: library).
    The library provider needs the task and backend it proposes kernels for."""
    name = "library" if settings.name == "auto" else settings.name
    if name not in PROVIDERS:
        raise SettingsError(f"provider.name is {settings.name!r}; choose one of: {', '.join(PROVIDERS)}")
    if name == "library":
        from agentforge.llm.library_provider import LibraryProvider

        if task_name is None or backend is None:
            raise ValueError("the library provider needs task_name and backend")
        return LibraryProvider(task_name, backend, gpu=gpu, root=kernels_root)
    # A server by base URL is one's own (or a gateway with its own prices): hosted prices do not apply.
    prices = prices or load_price_table(settings.price_table, builtin=not settings.base_url)
    if name == "openai":
        from agentforge.llm.openai_provider import OpenAIProvider

        return OpenAIProvider(settings, prices, sleep=sleep)
    from agentforge.llm.anthropic_provider import AnthropicProvider

    return AnthropicProvider(settings, prices, sleep=sleep)
