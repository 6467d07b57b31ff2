"""Prompts that fit a small context window.

A local model's server may hold 2,048 or 4,096 tokens for prompt and reply together, while the
agent's prompt (task source, shapes, earlier verdicts, technique notes) can run longer. A prompt
the server cannot hold is refused outright, so the provider cuts it first: the middle of the
longest message goes, then of the next longest, and so on (a message's head states the job, its
tail holds the latest verdict or the answer format; the middle of a system prompt is technique
notes), replaced by one line that says how much was cut. Tokens are estimated from
characters, on the short side, so the cut prompt fits whatever the tokenizer.
"""

from __future__ import annotations

from dataclasses import replace

from agentforge.llm.base import Message

CUT_NOTE = "\n[... {n} characters cut to fit the server's {context}-token context ...]\n"
# A message keeps this many characters at each end (fewer when the whole budget is smaller).
MIN_KEPT_CHARS = 200


def estimate_tokens(messages: list[Message], chars_per_token: float) -> int:
    """Prompt tokens, estimated from characters plus a few tokens of chat framing per message."""
    return int(sum(len(m.content) for m in messages) / chars_per_token) + 16 * len(messages)


def fit_messages(messages: list[Message], budget_tokens: int, context: int, chars_per_token: float
                 ) -> tuple[list[Message], int]:
    """`messages` cut to about `budget_tokens` of prompt, and the number of characters cut (0 when
    they fit already). Cuts fall on the longest message first; each message's ends are kept, so a
    prompt may stay over budget when nothing else is left."""
    fitted = list(messages)
    cuts = [0] * len(messages)  # characters cut from each original message
    keep = min(MIN_KEPT_CHARS, max(0, int(budget_tokens * chars_per_token) // 4))  # at each end
    while (excess := estimate_tokens(fitted, chars_per_token) - budget_tokens) > 0:
        room = [len(m.content) - cuts[k] - 2 * keep for k, m in enumerate(messages)]
        candidates = [k for k in range(len(messages)) if room[k] > len(CUT_NOTE) + 40]
        if not candidates:
            break
        i = max(candidates, key=lambda k: len(fitted[k].content))
        text = messages[i].content
        cuts[i] = min(len(text) - 2 * keep,
                      cuts[i] + int(excess * chars_per_token) + len(CUT_NOTE) + 16)
        head = (len(text) - cuts[i]) // 2
        tail = len(text) - cuts[i] - head
        note = CUT_NOTE.format(n=cuts[i], context=context)
        fitted[i] = replace(messages[i], content=text[:head] + note + text[len(text) - tail:])
    return fitted, sum(cuts)
