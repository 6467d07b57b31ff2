"""Multi-turn episodes (Kevin) trained through TRL's `rollout_func`.

TRL hands the rollout function a batch of prompts, each repeated `num_generations` times in a
row (one group per prompt), and wants one (prompt, completion) pair back per entry. Here a
group of G entries becomes G / N episodes of N turns: turn 1 answers the task's prompt; turn
t+1's prompt shows every earlier turn's code with the evaluator's verdict (never the model's
reasoning), and asks for a revision. Each turn is one training sample, its prompt the history
it saw and its completion only the tokens the policy wrote.

Credit is Kevin's: each turn's reward is its own evaluation (the shaped reward of rl/rewards.py,
through the reward service), its return G_t = r_t + gamma * G_{t+1} counts what it led to, and the
returns of every turn of every episode in a group are z-scored together and clipped
(`grouping.episode_advantages`). TRL's group normalisation then sees G samples per group as
usual. Per-turn batch metrics (`rl/turn<t>_reward_mean`, `..._acceptance_rate`,
`..._return_mean`) go to the trainer's log, every turn's record to `rewards.jsonl`.

The smoke run's tiny policy reads compact prompts (its vocabulary: the task word, the earlier
bodies, one verdict word each, rl/tiny.py); real models read rl/prompts/multi_turn*.md.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentforge.rl.grouping import DEFAULT_CLIP, discounted_returns, episode_advantages
from agentforge.rl.records import NO_CODE, RewardRecord
from agentforge.rl.reward_fn import COMPLETION_MARK, batch_metrics
from agentforge.rl.service import RewardRequest, RewardService


@dataclass(frozen=True)
class Turn:
    completion: str  # what the policy wrote this turn
    record: RewardRecord  # the evaluator's verdict on it, shaped


def verdict_word(record: RewardRecord) -> str:
    """The tiny vocabulary's verdict (rl/tiny.py VERDICT_WORDS)."""
    if record.accepted:
        return "verdict:faster" if "beats_eager" in record.components else "verdict:correct"
    return "verdict:broken" if record.status in ("compile_error", NO_CODE) else "verdict:wrong"


def verdict_summary(record: RewardRecord) -> str:
    """The evaluator's one-line verdict, and the reward tier it reached."""
    text = record.summary or record.status
    if record.status == NO_CODE:
        text = "no code: the reply held no ModelNew module"
    tiers = [k for k in record.components if k != "gate"]
    return f"{text}; reward {record.reward:g} ({', '.join(tiers) or 'rejected'})"


def compact_prompt(first: str, turns: Sequence[Turn]) -> str:
    """The smoke run's prompt: the task word, then each earlier body and its verdict word."""
    return " ".join([first, *(f"{t.completion.strip()} {verdict_word(t.record)}" for t in turns)])


def full_prompt(row: dict[str, Any], turns: Sequence[Turn], backend: str) -> str:
    """rl/prompts/multi_turn.md: the task, earlier kernels and their verdict summaries."""
    from agentforge.rl.prompts import ScoredKernel, multi_turn_prompt

    from agentforge.candidate import NoCodeError, extract_code

    kernels = []
    for t in turns:
        try:
            source = extract_code(t.completion)
        except NoCodeError:
            source = t.completion.strip() or "(no code)"
        kernels.append(ScoredKernel(source, t.record.speedup, t.record.status, verdict_summary(t.record)))
    return multi_turn_prompt(row["task_name"], row["task_source"], kernels, backend).text


class EpisodeRollout:
    """TRL's `rollout_func` (call it) and the matching reward function (`reward`)."""

    def __init__(self, rows: Sequence[dict[str, Any]], service: RewardService, tokenizer: Any, *,
                 max_turns: int, gamma: float = 0.4, num_generations: int, compact: bool, chat: bool = False,
                 backend: str = "cpu", clip: float | None = DEFAULT_CLIP, normalize: bool = True,
                 log_path: str | Path | None = None) -> None:
        if max_turns < 1 or num_generations % max_turns:
            raise ValueError(f"num_generations ({num_generations}) must be a multiple of max_turns ({max_turns})")
        self.rows = {_prompt_key(r["prompt"]): r for r in rows}
        self.service, self.tokenizer = service, tokenizer
        self.max_turns, self.gamma, self.num_generations = max_turns, gamma, num_generations
        self.compact, self.chat, self.backend = compact, chat, backend
        self.clip, self.normalize = clip, normalize
        self.log_path = Path(log_path) if log_path else None
        self._lock = threading.Lock()
        self._batch: list[RewardRecord] = []  # the last rollout's records, sample order
        self.reward = _EpisodeReward(self)

    # ----- the rollout ----------------------------------------------------------------------
    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        step = trainer.state.global_step
        episodes = self._episodes(prompts)
        histories: list[list[Turn]] = [[] for _ in episodes]
        samples: dict[tuple[int, int], tuple[list[int], list[int], list[float]]] = {}
        for t in range(self.max_turns):
            texts = [self._prompt(row, histories[e]) for e, (_, row) in enumerate(episodes)]
            generated = generate(trainer, self.tokenizer, [self._tokens(x) for x in texts])
            requests = []
            for e, ((group, row), (prompt_ids, completion_ids, logprobs)) in enumerate(
                    zip(episodes, generated, strict=True)):
                text = self.tokenizer.decode(completion_ids, skip_special_tokens=True)
                samples[(e, t)] = (prompt_ids, completion_ids, logprobs)
                requests.append(self._request(row, text, step, group, e, t, texts[e]))
            records = self.service.score_sync(requests)
            for e, (request, record) in enumerate(zip(requests, records, strict=True)):
                histories[e].append(Turn(request.meta["completion"], record))
        return self._output(histories, samples)

    def _episodes(self, prompts: Sequence[Any]) -> list[tuple[int, dict[str, Any]]]:
        """(group, row) per episode, in sample order: group g, episode k holds samples
        g*G + k*N ... g*G + k*N + N - 1."""
        G, N = self.num_generations, self.max_turns
        if len(prompts) % G:
            raise ValueError(f"{len(prompts)} prompts is not whole groups of {G}")
        episodes = []
        for g in range(len(prompts) // G):
            key = _prompt_key(prompts[g * G])
            if key not in self.rows:
                raise KeyError(f"rollout got a prompt that is not in the training rows: {key[:80]!r}")
            episodes += [(g, self.rows[key])] * (G // N)
        return episodes

    def _prompt(self, row: dict[str, Any], turns: Sequence[Turn]) -> Any:
        if not turns:
            return row["prompt"]
        if self.compact:
            return compact_prompt(_prompt_key(row["prompt"]), turns)
        text = full_prompt(row, turns, self.backend)
        return [{"role": "user", "content": text}] if self.chat else text

    def _tokens(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list):  # chat messages: the model's template, with the assistant's cue
            prompt = self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        return list(self.tokenizer(prompt)["input_ids"])

    def _request(self, row: dict[str, Any], text: str, step: int, group: int, episode: int, turn: int,
                 prompt: Any) -> RewardRequest:
        template = row.get("template")
        reply = template.replace(COMPLETION_MARK, text) if template else text
        ref = row.get("reference_speedup")
        meta = {"step": step, "group": group, "episode": episode, "turn": turn + 1, "completion": text}
        if self.compact:  # a few words: kept, so the log shows what each turn saw
            meta["prompt"] = prompt
        if ref and row.get("reference_record"):
            meta["reference_record"] = row["reference_record"]
        return RewardRequest(row["task_name"], row["task_source"], reply,
                             reference_speedup=float(ref) if ref else None, meta=meta)

    def _output(self, histories: Sequence[Sequence[Turn]],
                samples: dict[tuple[int, int], tuple[list[int], list[int], list[float]]]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "turn",
                                                      "episode", "turn_reward", "turn_return")}
        batch = []
        for e, history in enumerate(histories):
            returns = discounted_returns([t.record.reward for t in history], self.gamma)
            for t, (turn, ret) in enumerate(zip(history, returns, strict=True)):
                prompt_ids, completion_ids, logprobs = samples[(e, t)]
                out["prompt_ids"].append(prompt_ids)
                out["completion_ids"].append(completion_ids)
                out["logprobs"].append(logprobs)
                out["turn"].append(t + 1)
                out["episode"].append(e)
                out["turn_reward"].append(turn.record.reward)
                out["turn_return"].append(ret)
                batch.append(turn.record)
        with self._lock:
            self._batch = batch
        return out

    # ----- credit ---------------------------------------------------------------------------
    def advantages(self, turn_reward: Sequence[float], turn: Sequence[int]) -> list[float]:
        """Per sample: discounted returns z-scored across every turn of every episode of its
        group (episode_advantages), or the plain returns when TRL normalises."""
        G, N = self.num_generations, self.max_turns
        out: list[float] = []
        for start in range(0, len(turn_reward), G):
            scores = list(turn_reward[start:start + G])
            if [int(t) for t in turn[start:start + G]] != [k % N + 1 for k in range(len(scores))]:
                raise ValueError("samples are not in episode order (whole episodes of max_turns turns)")
            episodes = [scores[k:k + N] for k in range(0, len(scores), N)]
            if self.normalize:
                per = episode_advantages(episodes, self.gamma, self.clip)
            else:
                per = [discounted_returns(ep, self.gamma) for ep in episodes]
            out += [a for ep in per for a in ep]
        return out

    def log(self, records: Sequence[RewardRecord], returns: Sequence[float], advantages: Sequence[float],
            step: int) -> None:
        if self.log_path is None:
            return
        lines = [json.dumps({**r.to_dict(), "turn_return": g, "advantage": a, "step": step}, default=str)
                 for r, g, a in zip(records, returns, advantages, strict=True)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as handle:
            handle.write("\n".join(lines) + "\n")


class _EpisodeReward:
    """The reward function TRL calls after the rollout: each turn's advantage-ready credit."""

    __name__ = "episode_reward"

    def __init__(self, rollout: EpisodeRollout) -> None:
        self.rollout = rollout

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], turn_reward: Sequence[float],
                 turn_return: Sequence[float], turn: Sequence[int], **columns: Any) -> list[float]:
        log_metric: Callable[[str, float], None] | None = columns.pop("log_metric", None)
        state = columns.pop("trainer_state", None)
        step = getattr(state, "global_step", 0)
        rollout = self.rollout
        with rollout._lock:
            records = list(rollout._batch)
        if len(records) != len(turn_reward):
            raise ValueError(f"{len(turn_reward)} samples but the last rollout scored {len(records)}")
        credit = rollout.advantages(turn_reward, turn)
        rollout.log(records, turn_return, credit, step)
        if log_metric is not None:
            for name, value in episode_metrics(records, turn, turn_return, rollout.num_generations).items():
                log_metric(name, value)
        return credit


def episode_metrics(records: Sequence[RewardRecord], turns: Sequence[int], returns: Sequence[float],
                    num_generations: int) -> dict[str, float]:
    """batch_metrics over every turn, and per turn: mean reward, acceptance, mean return."""
    metrics = batch_metrics(records, num_generations)
    for t in sorted(set(turns)):
        idx = [i for i, k in enumerate(turns) if k == t]
        n = len(idx)
        metrics[f"rl/turn{t}_reward_mean"] = sum(records[i].reward for i in idx) / n
        metrics[f"rl/turn{t}_acceptance_rate"] = sum(records[i].accepted for i in idx) / n
        metrics[f"rl/turn{t}_return_mean"] = sum(returns[i] for i in idx) / n
    return metrics


Sample = tuple[list[int], list[int], list[float]]  # prompt ids, completion ids, their log-probabilities


def generate(trainer: Any, tokenizer: Any, prompts: Sequence[list[int]]) -> list[Sample]:
    """Sample one completion per prompt from the policy as it is now (TRL's sampling settings):
    (prompt ids, completion ids up to and with the first EOS, their sampling log-probabilities).
    Runs in process with transformers' generate (no vLLM path here)."""
    import torch

    model = trainer.accelerator.unwrap_model(trainer.model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(p) for p in prompts)
    device = next(model.parameters()).device
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            # TRL's own sampling settings (temperature, top-p/k, max_completion_length, generation_kwargs).
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=trainer.generation_config,
                                 return_dict_in_generate=True, output_scores=True)
    finally:
        model.train(was_training)
    new = out.sequences[:, width:]
    logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
    chosen = logps.gather(-1, new.unsqueeze(-1)).squeeze(-1)
    results = []
    for i, p in enumerate(prompts):
        tokens = new[i].tolist()
        if tokenizer.eos_token_id in tokens:
            tokens = tokens[: tokens.index(tokenizer.eos_token_id) + 1]
        results.append((list(p), tokens, chosen[i, : len(tokens)].tolist()))
    return results


def _prompt_key(prompt: Any) -> str:
    """A prompt's identity: its text, or its last message's content for chat prompts."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    return str(prompt)
