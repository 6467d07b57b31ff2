"""What a call costs: a price table per model, in USD per million tokens.

The built-in table covers the common hosted models; a user overrides or extends it with a TOML
file named in settings (`provider.price_table`). A server named by `provider.base_url` (vLLM,
Ollama, llama.cpp on one's own machine) is billed from that file alone, never from the built-in
hosted prices, so a local model costs nothing unless its prices are configured:

    [models."gpt-4.1"]
    input = 2.0      # USD per million input tokens
    output = 8.0     # USD per million output tokens

A model is matched exactly, then by the longest table key it starts with (so dated snapshots such
as `claude-sonnet-4-5-20250929` find `claude-sonnet-4-5`). A model with no entry (a local vLLM or
Ollama server) costs nothing, and `is_priced` says so for the report.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-5": Price(1.25, 10.0),
    "gpt-5-mini": Price(0.25, 2.0),
    "gpt-5-nano": Price(0.05, 0.40),
    "gpt-4.1": Price(2.0, 8.0),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "gpt-4o": Price(2.50, 10.0),
    "gpt-4o-mini": Price(0.15, 0.60),
    "o3": Price(2.0, 8.0),
    "o4-mini": Price(1.10, 4.40),
    # Assumed to keep the Sonnet 4.x price; override in a price table if it changed.
    "claude-sonnet-4-6": Price(3.0, 15.0),
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.80, 4.0),
}


class PriceTable:
    """Prices by model name; `cost` turns token counts into dollars."""

    def __init__(self, prices: Mapping[str, Price] | None = None):
        self.prices = dict(DEFAULT_PRICES if prices is None else prices)

    def lookup(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        prefixes = [key for key in self.prices if model.startswith(key)]
        return self.prices[max(prefixes, key=len)] if prefixes else None

    def is_priced(self, model: str) -> bool:
        return self.lookup(model) is not None

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        price = self.lookup(model)
        if price is None:
            return 0.0
        return (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok) / 1e6


class PriceTableError(ValueError):
    """A price-table file that cannot be read; the message names the file and the entry."""


def load_price_table(path: str | Path | None = None, builtin: bool = True) -> PriceTable:
    """The built-in prices (none when `builtin` is False), overridden entry by entry by the TOML
    file at `path` if given."""
    table = PriceTable() if builtin else PriceTable({})
    if path is None:
        return table
    file = Path(path).expanduser()
    try:
        with file.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PriceTableError(f"price table {file}: {exc}") from exc
    for model, entry in (data.get("models") or {}).items():
        try:
            table.prices[model] = Price(float(entry["input"]), float(entry["output"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise PriceTableError(
                f"price table {file}: models.{model!r} needs numeric `input` and `output` (USD per "
                "million tokens)"
            ) from exc
    return table
