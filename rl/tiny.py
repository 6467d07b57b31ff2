"""A tiny causal LM and a tokenizer built in code, for CPU proofs of the training loop.

No download: the tokenizer is a `tokenizers` WordLevel model over a fixed vocabulary, and the
model a 2-layer Llama built from a config with random weights. Its vocabulary is the smoke
problem's prompt words plus C statements (`v=v+v;`): what the policy writes is literally the
body of a C++ kernel's inner loop, which `rl/smoke/skeleton.txt` places into a lean kernel.
Some token strings compute relu(v), some do not, some do not compile (the prompt word, or
`v=;`): the evaluator's verdicts, not a scripted table, give rewards that vary within a group.
With two tokens about one completion in five is a correct kernel at the start.

The smoke pool (`SMOKE_TASKS`) pairs a prompt word with a task and the skeleton its completions
fill: `relu` (a scalar loop, slower than eager's vectorised relu) and `add_mul_relu` (the real
level2 task, one fused OpenMP pass where eager makes four: faster than eager at the `cpu` shape).
Verdict words (`VERDICT_WORDS`) let multi-turn prompts show the evaluator's verdict compactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIALS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
PROMPT_WORDS = ("relu:", "add_mul_relu:")
# One word per verdict class, for the compact multi-turn prompts of the smoke run (rl/multi_turn.py).
VERDICT_WORDS = ("verdict:faster", "verdict:correct", "verdict:wrong", "verdict:broken")
STATEMENTS = (
    "v=v>0.0f?v:0.0f;",  # relu
    "v=v<0.0f?0.0f:v;",  # relu, spelled otherwise
    "v=v*1.0f;",  # changes nothing
    "v=v+v;",  # doubles: wrong
    "v=-v;",  # negates: wrong
    "v=;",  # does not compile
)
SMOKE_DIR = Path(__file__).resolve().parent / "smoke"
TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"
SMOKE_PROMPT = "relu:"


@dataclass(frozen=True)
class SmokeTask:
    """One entry of the smoke pool: the prompt word, the task, and the skeleton a completion fills."""

    prompt: str
    task_name: str
    task_path: Path
    skeleton: Path


SMOKE_TASKS: dict[str, SmokeTask] = {
    "relu": SmokeTask("relu:", "smoke/relu", SMOKE_DIR / "relu.py", SMOKE_DIR / "skeleton.txt"),
    "add_mul_relu": SmokeTask("add_mul_relu:", "level2/add_mul_relu", TASKS_DIR / "level2" / "add_mul_relu.py",
                              SMOKE_DIR / "skeleton_fused.txt"),
}


def smoke_entry(key: str) -> SmokeTask:
    if key not in SMOKE_TASKS:
        raise KeyError(f"unknown smoke task {key!r}; choose from {', '.join(SMOKE_TASKS)}")
    return SMOKE_TASKS[key]


def build_tokenizer() -> Any:
    """A PreTrainedTokenizerFast over SPECIALS, PROMPT_WORDS, STATEMENTS and VERDICT_WORDS, split on spaces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = (*SPECIALS, *PROMPT_WORDS, *STATEMENTS, *VERDICT_WORDS)
    vocab = {token: i for i, token in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]",
    )


def build_model(tokenizer: Any, hidden_size: int = 32, layers: int = 2, heads: int = 4, seed: int = 0) -> Any:
    """A randomly initialised Llama of about 20k parameters."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def smoke_task() -> tuple[str, str]:
    """(name, source) of the smoke task."""
    path = SMOKE_DIR / "relu.py"
    return "smoke/relu", path.read_text()


def smoke_template() -> str:
    """The reply a completion is placed into: `{completion}` marks the loop body."""
    return (SMOKE_DIR / "skeleton.txt").read_text()


def input_only_token_ids(tokenizer: Any) -> list[int]:
    """Words the policy reads but never writes (verdict words): suppressed when sampling."""
    return [tokenizer.convert_tokens_to_ids(w) for w in VERDICT_WORDS]
