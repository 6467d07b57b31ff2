"""The offline provider: it proposes the shipped reference kernel for the task and its declared
tunable variants, so `agentforge optimize` runs end to end with no key.

It is stateless (so a resumed run picks up where it left off): as coder it proposes the first
variant whose code hash does not yet appear in the conversation (the coder prompt lists the hashes
already tried); as judge it answers a fixed, well-formed verdict of the mode the prompt asks for.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agentforge.candidate import code_hash, extract_code
from agentforge.kernel_library import ReferenceKernel, find_kernel, list_kernels, variant_sources
from agentforge.llm.base import Completion, Message, ProviderError, Usage

HOW_TO_CONFIGURE = (
    "Configure a real provider: set OPENAI_API_KEY (provider openai) or ANTHROPIC_API_KEY (provider "
    "anthropic), or point --base-url at an OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp) "
    "with --provider openai --model NAME. See docs/optimize.md."
)


class LibraryProvider:
    name = "library"

    def __init__(self, task_name: str, backend: str, gpu: str | None = None, root: Path | None = None,
                 limit: int = 8):
        kernel = (find_kernel(task_name, backend, gpu=gpu, root=root)
                  or _kernelbench_kernel(task_name, backend, gpu, root))
        if kernel is None:
            raise ProviderError(
                f"the kernel library ships no {backend} kernel for {task_name}, so the offline `library` "
                f"provider has nothing to propose. {HOW_TO_CONFIGURE}"
            )
        self.kernel: ReferenceKernel = kernel
        self.variants = [
            (params, f"```python\n{source.strip()}\n```") for params, source in variant_sources(kernel, limit)
        ]

    @property
    def planned_rounds(self) -> int:
        """One round per variant: there is nothing else to propose."""
        return len(self.variants)

    def model_for(self, role: str) -> str:
        return f"library:{self.kernel.gpu}/{self.kernel.task_name}"

    def complete(
        self, messages: list[Message], *, model: str | None = None, role: str = "coder",
        max_tokens: int | None = None, temperature: float | None = None,
    ) -> Completion:
        conversation = "\n".join(m.content for m in messages)
        text = self._judge(conversation) if role == "judge" else self._coder(conversation)
        return Completion(text=text, model=self.model_for(role), usage=Usage())

    def _coder(self, conversation: str) -> str:
        for params, block in self.variants:
            if code_hash(extract_code(block)) not in conversation:
                label = ", ".join(f"{k}={v}" for k, v in params.items()) or "as shipped"
                return (f"Shipped reference kernel for {self.kernel.task_name} "
                        f"({self.kernel.gpu}, {label}).\n\n{block}\n")
        return f"Every shipped variant of this kernel has been tried. {HOW_TO_CONFIGURE}"

    def _judge(self, conversation: str) -> str:
        verdict: dict[str, Any]
        if '"mode": "repair"' in conversation:
            verdict = {
                "mode": "repair",
                "critical_issue": "the proposed library variant failed on this machine",
                "why_it_matters": "only correct kernels can be kept",
                "smallest_fix": "try the next shipped variant",
            }
        else:
            verdict = {
                "mode": "optimise",
                "bottleneck": "unknown to the offline provider",
                "evidence": ["measured speedup only"],
                "optimisation": "try the next declared tunable setting",
                "plan": ["propose the next shipped variant"],
            }
        return "```json\n" + json.dumps(verdict, indent=2) + "\n```\n"


def _kernelbench_kernel(task_name: str, backend: str, gpu: str | None, root: Path | None) -> ReferenceKernel | None:
    """The shipped kernel of the same operator for a KernelBench problem, whose files are named
    `<n>_<Operator>` (`level1/19_ReLU` -> the library's `relu`), when exactly one task matches; the
    evaluator then checks it on the problem like any proposal."""
    match = re.fullmatch(r"\d+_([A-Za-z][A-Za-z0-9]*)_?", task_name.rsplit("/", 1)[-1])
    if match is None:
        return None
    names = {k.task_name for k in list_kernels(None, root) if k.backend == backend
             and k.task_name.rsplit("/", 1)[-1] == match[1].lower()}
    return find_kernel(names.pop(), backend, gpu=gpu, root=root) if len(names) == 1 else None
