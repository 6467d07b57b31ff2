"""The loop's steps, one function per graph node; each reads the state and returns a partial
update. What a node needs from outside (the provider, the evaluator, the artifact store, the task)
comes in `Deps`, so tests pass fakes and `graph.py` holds only the wiring."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langgraph.types import interrupt

from agentforge.agent import prompts
from agentforge.agent.artifacts import ArtifactStore
from agentforge.agent.beam import beats
from agentforge.agent.budget import stop_reason
from agentforge.agent.feedback import describe_result
from agentforge.agent.schemas import (
    RepairVerdict,
    Verdict,
    VerdictError,
    fallback_verdict,
    parse_verdict,
    verdict_from_dict,
    verdict_to_dict,
)
from agentforge.agent.state import KernelRef, Pending, RoundRecord, RunState
from agentforge.agent.target import parse_target, performance_text
from agentforge.candidate import Candidate, NoCodeError, Provenance, extract_code
from agentforge.evaluator.result import EvalResult, Status
from agentforge.llm.base import Completion, Message, Provider, ProviderError
from agentforge.settings import AgentSettings
from agentforge.task import Task, TaskText

# A new best must beat the old one by this share to count as progress against the plateau rule
# (timing noise alone should not keep a run going).
MIN_GAIN = 0.01
# The stop reason of a run whose task failed in the evaluator before any candidate code ran.
TASK_ERROR_STOP = "task error: "


@dataclass
class Deps:
    provider: Provider
    store: ArtifactStore
    task: Task | TaskText  # read, not imported: the loop needs only its name and source
    backend: str
    evaluate: Callable[[Task | TaskText, Candidate], EvalResult]
    limits: AgentSettings = field(default_factory=AgentSettings)
    device_spec: str = "unknown device"
    planned_rounds: int | None = None  # the provider's own limit (the library provider's variants)
    review: bool = False
    finish: Callable[[RunState], None] | None = None  # writes the best kernel, report and plot
    history_window: int = 6
    shape_note: str = "the task's default shape is checked and timed"  # which shapes, for the prompts
    notify: Callable[[str], None] | None = None  # hears what is in flight now (a model call, an evaluation)
    # (text for the coder's system prompt, what it used: notes, exemplars) for a state; None: nothing
    knowledge: Callable[[Any], tuple[str, dict[str, Any]]] | None = None
    # build + correctness only (no timing), for the search's concurrent check stage; None: evaluate only
    check: Callable[[Task | TaskText, Candidate], EvalResult] | None = None
    candidates: int = 1  # proposals per round (the search graph when above 1, or with a beam)
    beam_width: int = 1  # kernels carried to the next round


# ----- coder ------------------------------------------------------------------------------------
def setup(state: RunState, deps: Deps) -> dict[str, Any]:
    """Start a run: the task is loaded (in Deps); baselines come with every evaluation."""
    return {
        "task_name": deps.task.name, "backend": deps.backend, "round": 0, "mode": "initial",
        "base": None, "best": None, "verdict_ref": None, "needs_judge": False, "pending": None,
        "failed_repairs": 0, "flat_rounds": 0, "stop_reason": None, "approved": None, "finished": False,
    }


def coder(state: RunState, deps: Deps) -> dict[str, Any]:
    return coder_call(state, deps)


def coder_call(state: RunState, deps: Deps, *, temperature: float | None = None, strategy: str | None = None,
               slot: tuple[int, int] | None = None) -> dict[str, Any]:
    """One coder proposal for `state`'s base and mode: {"pending", "usage"}, or a stop reason when
    the provider failed for good. The search's candidates pass `slot` (i of n), a `strategy` line
    and a `temperature`, so the proposals of one round differ."""
    rnd = state["round"] + 1
    mode = state["mode"]
    names = ("coder_system", f"backend_{deps.backend}", f"coder_{mode}")
    notes = prompts.render(f"backend_{deps.backend}")
    used: dict[str, Any] = {}
    if deps.knowledge is not None:
        extra, used = deps.knowledge(state)
        notes = f"{notes}\n\n{extra}" if extra else notes
    system = prompts.render("coder_system", backend_notes=notes)
    user = prompts.render(f"coder_{mode}", **_coder_vars(state, deps, rnd))
    if slot is not None:
        user += f"\n\n## This candidate\nCandidate: {slot[0]} of {slot[1]} in this round."
        user += f" Strategy: {strategy}" if strategy else ""
    messages = [Message("system", system), Message("user", user)]
    prompt_ref = deps.store.put_json({"role": "coder", "round": rnd, "mode": mode,
                                      "messages": [vars(m) for m in messages]})
    who = f"coder, round {rnd}" + (f", candidate {slot[0]}" if slot else "")
    _notify(deps, f"waiting for the model ({who})")
    try:
        if temperature is None:
            completion = deps.provider.complete(messages, role="coder")
        else:
            completion = deps.provider.complete(messages, role="coder", temperature=temperature)
    except ProviderError as exc:
        return {"stop_reason": f"provider failed: {exc}", "pending": None}
    usage = _usage(completion, deps.provider)
    pending: Pending = {"round": rnd, "mode": mode, "prompt_ref": prompt_ref, "model": completion.model,
                        "reply_ref": _put_reply(deps, "coder", rnd, completion, usage), "no_code": None,
                        "static_error": None}
    if used:
        pending["knowledge"] = used
    try:
        code = extract_code(completion.text)
    except NoCodeError as exc:
        pending["no_code"] = str(exc)
        usage["no_code_replies"] = 1
        return {"pending": pending, "usage": usage}
    base = state.get("base") or {}
    candidate = Candidate(code, deps.backend, Provenance(
        source="library" if deps.provider.name == "library" else "llm", model=completion.model, round=rnd,
        parent=base.get("code_hash"), prompt_version=prompts.version(*names),
    ))
    pending["kernel"] = {"round": rnd, "candidate_ref": deps.store.put_json(candidate.to_dict()),
                         "code_hash": candidate.code_hash, "result_ref": None, "status": "pending",
                         "accepted": False}
    return {"pending": pending, "usage": usage}


def _coder_vars(state: RunState, deps: Deps, rnd: int) -> dict[str, Any]:
    base = state.get("base")
    verdict = _verdict(state, deps)
    common = {"round": rnd, "task_name": deps.task.name, "reference": deps.task.source.strip(),
              "device_spec": deps.device_spec, "history": _history(state, deps), "shapes": deps.shape_note}
    if state["mode"] == "initial":
        return {**common, "notes": verdict.render() if verdict else "none"}
    assert base is not None
    return {
        **common, "base_hash": base["code_hash"], "base_source": _source(deps, base),
        "result": _result_text(deps, base), "verdict": verdict.render() if verdict else "none yet",
        "best": _best_text(state, deps),
    }


# ----- checks and evaluation --------------------------------------------------------------------
_BACKEND_MARKERS = {
    "cpu": ("load_cpp", "load_inline"),
    "cuda": ("load_inline", "load_cuda", "cupy", "RawKernel", "cpp_extension"),
    "triton": ("triton.jit",),
}


def static_check(state: RunState, deps: Deps) -> dict[str, Any]:
    """Cheap checks before the sandbox: the code is new, it parses, defines ModelNew, and builds a
    kernel. A failed check comes with the fix for what is actually missing."""
    pending = dict(state["pending"] or {})
    kernel = pending["kernel"]
    earlier = [r for r in state.get("history") or [] if r.get("code_hash") == kernel["code_hash"]]
    if earlier:  # the same code again: its verdict is known, so it is not evaluated twice
        pending["duplicate_of"] = earlier[-1]["round"]
        return {"pending": pending}
    error, fix = check_source(_source(deps, kernel), deps.backend)
    pending["static_error"], pending["static_fix"] = error, fix
    return {"pending": pending}


def check_source(source: str, backend: str) -> tuple[str | None, str | None]:
    """(what is wrong, the smallest fix) for a candidate module, or (None, None) when it parses,
    defines `ModelNew` and builds a kernel of the backend."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return (f"the module does not parse: line {exc.lineno}: {exc.msg}",
                f"fix the syntax at line {exc.lineno} and answer with the whole module")
    classes = sorted({n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)})
    markers = _BACKEND_MARKERS[backend]
    if "ModelNew" not in classes:
        found = f"it defines {', '.join(f'`{c}`' for c in classes)}" if classes else "it defines no class"
        return (f"the module defines no `class ModelNew` ({found})",
                "name the module that computes the result `class ModelNew(torch.nn.Module)`, with the "
                "reference Model's constructor arguments")
    if not any(m in source for m in markers):
        return (f"`ModelNew` is defined, but the module builds no {backend} kernel (none of: {', '.join(markers)})",
                f"write the computation as a {backend} kernel, build it with {markers[0]} as the backend notes "
                "show, and call it from `ModelNew.forward`; calling PyTorch operations is not a kernel")
    return None, None


def evaluate(state: RunState, deps: Deps) -> dict[str, Any]:
    pending = dict(state["pending"] or {})
    kernel = dict(pending["kernel"])
    candidate = Candidate.from_dict(deps.store.get_json(kernel["candidate_ref"]))
    _notify(deps, f"evaluating round {pending.get('round')} in the sandbox")
    result = deps.evaluate(deps.task, candidate)
    kernel.update(_figures(result), result_ref=deps.store.put_text(result.to_json(indent=1), "json"))
    pending["kernel"] = kernel
    if result.status == Status.TASK_ERROR:
        # No candidate can pass a task that fails on its own: repair rounds would be paid for nothing.
        return {"pending": pending, "stop_reason": task_error_reason(result), "usage": {"evaluations": 1}}
    return {"pending": pending, "usage": {"evaluations": 1}}


def task_error_reason(result: EvalResult) -> str:
    error = result.error
    cause = f"{error.type}: {error.message}" if error is not None else "the task failed"
    return (f"{TASK_ERROR_STOP}{cause} (the task failed before any candidate code ran; fix the task file "
            "and start a new run)")


def profile(state: RunState, deps: Deps) -> dict[str, Any]:
    """Keep the profile of an accepted kernel, rendered for the judge, when one was taken."""
    pending = dict(state["pending"] or {})
    kernel = pending["kernel"]
    result = _result(deps, kernel)
    pending["profile_ref"] = None
    if result is not None and result.accepted and result.profile is not None and result.profile.available:
        pending["profile_ref"] = deps.store.put_text(describe_result(result), "md")
    return {"pending": pending}


# ----- keep best / revert -----------------------------------------------------------------------
def select(state: RunState, deps: Deps) -> dict[str, Any]:
    """Close the round: keep the best kernel, choose the base of the next round, and its mode."""
    pending = state["pending"] or {}
    limits = deps.limits
    best, base = state.get("best"), state.get("base")
    failed, flat = state.get("failed_repairs", 0), state.get("flat_rounds", 0) + 1
    # A failure in the initial round is not a failed repair: nothing was being repaired yet.
    counts = 1 if pending.get("mode", state["mode"]) != "initial" else 0
    update: dict[str, Any] = {"needs_judge": True}
    kernel: KernelRef | None = pending.get("kernel")
    if kernel is not None and pending.get("duplicate_of") is not None:
        # Same base, same verdict, one more try; the history tells the coder it repeated itself.
        mode, failed, status = state["mode"], failed + (1 if state["mode"] == "repair" else 0), "duplicate"
        outcome = f"identical to round {pending['duplicate_of']}'s code: not evaluated again"
        update["needs_judge"] = False
    elif pending.get("no_code") or pending.get("static_error") or kernel is None:
        issue = pending.get("no_code") or pending.get("static_error") or "no candidate"
        status = "no_code" if pending.get("no_code") else "static_error"
        if status == "static_error" and kernel is not None:
            base = {**kernel, "status": status}
        verdict = RepairVerdict(
            critical_issue=f"{'the reply' if status == 'no_code' else 'the module'}: {issue}",
            why_it_matters="nothing can be evaluated until the reply is one complete, valid module",
            smallest_fix=pending.get("static_fix") or (
                "answer with one complete module defining `class ModelNew` in one ```python block"),
        )
        update.update(needs_judge=False, verdict_ref=deps.store.put_json(verdict_to_dict(verdict)))
        mode, failed, outcome = ("repair" if base else "initial"), failed + counts, "asked again"
    elif kernel.get("status") == Status.TASK_ERROR.value:
        # Not the candidate's fault: no repair, no judge; the stop reason set at evaluation ends the run.
        mode, status, outcome = state["mode"], kernel["status"], "the task failed before the candidate ran: stopped"
        update["needs_judge"] = False
    elif kernel.get("accepted"):
        failed, mode = 0, "optimise"
        if best is None or _better(kernel, best):
            if best is None or _gain(kernel, best) > MIN_GAIN:
                flat = 0
            best = base = kernel
            outcome = "new best"
        elif _much_slower(kernel, best, limits.slower_revert_ratio):
            base, outcome = best, f"much slower than the best: base reverted to round {best['round']}"
        else:
            base, outcome = kernel, "kept as base"
        status = kernel["status"]
    else:
        base, mode, failed, status = kernel, "repair", failed + counts, kernel["status"]
        outcome = "failed"
    if mode == "repair" and failed >= limits.max_failed_repairs:
        if best is not None:
            base, mode = best, "optimise"
            outcome += f"; {failed} failed repairs: reverted to the best kernel (round {best['round']})"
            update["needs_judge"] = True
        else:
            base, mode = None, "initial"
            outcome += f"; {failed} failed repairs and no correct kernel yet: starting afresh"
            update.update(needs_judge=False, verdict_ref=None)
        failed = 0
    record: RoundRecord = {
        "round": pending.get("round", state["round"] + 1), "mode": pending.get("mode", state["mode"]),
        "code_hash": kernel["code_hash"] if kernel else None, "status": status,
        "speedup": kernel.get("speedup") if kernel else None,
        "speedup_vs_compile": kernel.get("speedup_vs_compile") if kernel else None,
        "candidate_us": kernel.get("candidate_us") if kernel else None,
        "best_speedup": best.get("speedup") if best else None, "outcome": outcome,
        "verdict": _verdict_line(state, deps),
        "refs": {"prompt": pending.get("prompt_ref"), "reply": pending.get("reply_ref"),
                 "candidate": kernel.get("candidate_ref") if kernel else None,
                 "result": kernel.get("result_ref") if kernel else None,
                 "verdict": state.get("verdict_ref"), "judge": state.get("judge_refs")},
        "cost_usd": float((state.get("usage") or {}).get("cost_usd", 0)),
    }
    if pending.get("knowledge"):
        record["knowledge"] = pending["knowledge"]
    update.update(round=record["round"], mode=mode, base=base, best=best, failed_repairs=failed,
                  flat_rounds=flat, pending=None, judge_refs=None, history=[record])
    return update


def budget(state: RunState, deps: Deps) -> dict[str, Any]:
    reason = state.get("stop_reason") or stop_reason(state, deps.limits, deps.planned_rounds)
    return {"stop_reason": reason}


# ----- judge ------------------------------------------------------------------------------------
def judge(state: RunState, deps: Deps) -> dict[str, Any]:
    mode = state["mode"]
    base = state["base"]
    assert base is not None and mode in ("repair", "optimise")
    result_text = _result_text(deps, base)
    user = prompts.render(
        f"judge_{mode}", round=state["round"], task_name=deps.task.name,
        reference=deps.task.source.strip(), base_hash=base["code_hash"], base_source=_source(deps, base),
        result=result_text, device_spec=deps.device_spec, history=_history(state, deps), shapes=deps.shape_note,
        performance=performance_text(parse_target(deps.limits.target), _result(deps, base), base),
    )
    messages = [Message("system", prompts.render("judge_system")), Message("user", user)]
    refs: dict[str, str | None] = {"prompt_ref": deps.store.put_json(
        {"role": "judge", "round": state["round"], "mode": mode, "messages": [vars(m) for m in messages]}),
        "reply_ref": None}
    usage: dict[str, Any] = {}
    _notify(deps, f"waiting for the model (judge, round {state['round']})")
    try:
        completion = deps.provider.complete(messages, role="judge")
    except ProviderError as exc:
        verdict: Verdict = fallback_verdict(mode, f"the judge call failed: {exc}", result_text)
    else:
        usage = _usage(completion, deps.provider)
        refs["reply_ref"] = _put_reply(deps, "judge", state["round"], completion, usage)
        try:
            verdict = parse_verdict(completion.text, mode)
        except VerdictError as exc:
            verdict = fallback_verdict(mode, f"malformed judge reply: {exc}", result_text)
    refs["verdict_ref"] = deps.store.put_json(verdict_to_dict(verdict))
    return {"verdict_ref": refs["verdict_ref"], "judge_refs": refs, "usage": usage}


# ----- finish -----------------------------------------------------------------------------------
def finish(state: RunState, deps: Deps) -> dict[str, Any]:
    approved = state.get("approved")
    if deps.review and approved is None:
        best = state.get("best") or {}
        answer = interrupt({
            "question": "Accept the best kernel and finish the run?", "stop_reason": state.get("stop_reason"),
            "best_round": best.get("round"), "best_speedup": best.get("speedup"),
            "best_code_hash": best.get("code_hash"),
        })
        approved = bool(answer)
    final = {**state, "approved": approved, "finished": True}
    if deps.finish is not None:
        deps.finish(final)  # type: ignore[arg-type]
    return {"approved": approved, "finished": True}


# ----- helpers ----------------------------------------------------------------------------------
def _figures(result: EvalResult) -> dict[str, Any]:
    roof = result.roofline
    return {
        "status": result.status.value, "accepted": result.accepted, "speedup": result.speedup,
        "speedup_ci": list(result.speedup_ci) if result.speedup_ci is not None else None,
        "speedup_vs_compile": result.speedup_vs_compile, "candidate_us": result.candidate_us,
        "eager_us": result.eager_us, "compile_us": result.compile_us,
        "sol_fraction": roof.sol_fraction if roof is not None and result.accepted else None,
        "roofline_label": roof.label if roof is not None and roof.label != "unknown" else None,
    }


def _better(new: KernelRef, old: KernelRef) -> bool:
    """A new best only beyond the noise: its speedup interval clears the best's (`beam.beats`)."""
    if new.get("speedup") is not None and old.get("speedup") is not None:
        return beats(new, old)
    return (new.get("candidate_us") or float("inf")) < (old.get("candidate_us") or float("inf"))


def _gain(new: KernelRef, old: KernelRef) -> float:
    if new.get("speedup") and old.get("speedup"):
        return new["speedup"] / old["speedup"] - 1.0  # type: ignore[operator]
    if new.get("candidate_us") and old.get("candidate_us"):
        return old["candidate_us"] / new["candidate_us"] - 1.0  # type: ignore[operator]
    return 0.0


def _much_slower(new: KernelRef, best: KernelRef, ratio: float) -> bool:
    new_us, best_us = new.get("candidate_us"), best.get("candidate_us")
    return bool(new_us and best_us and new_us > best_us * ratio)


def _usage(completion: Completion, provider: Provider) -> dict[str, Any]:
    prices = getattr(provider, "prices", None)
    unpriced = [completion.model] if prices is not None and not prices.is_priced(completion.model) else []
    return {"input_tokens": completion.usage.input_tokens, "output_tokens": completion.usage.output_tokens,
            "cost_usd": completion.usage.cost_usd, "calls": 1, "retries": completion.retries,
            "unpriced_models": unpriced}


def _put_reply(deps: Deps, role: str, rnd: int, completion: Completion, usage: dict[str, Any]) -> str:
    """Keep a reply with what it cost (tokens and dollars per call)."""
    return deps.store.put_json({"role": role, "round": rnd, "model": completion.model, "text": completion.text,
                                "usage": usage})


def _source(deps: Deps, kernel: KernelRef) -> str:
    return str(deps.store.get_json(kernel["candidate_ref"])["source"]).strip()


def _result(deps: Deps, kernel: KernelRef) -> EvalResult | None:
    ref = kernel.get("result_ref")
    return EvalResult.from_json(deps.store.get_text(ref)) if ref else None


def _result_text(deps: Deps, kernel: KernelRef) -> str:
    result = _result(deps, kernel)
    if result is None:
        return f"Not evaluated: {kernel.get('status', 'pending')}"
    return describe_result(result)


def _verdict(state: RunState, deps: Deps) -> Verdict | None:
    ref = state.get("verdict_ref")
    return verdict_from_dict(deps.store.get_json(ref)) if ref else None


def _verdict_line(state: RunState, deps: Deps) -> str | None:
    verdict = _verdict(state, deps)
    if verdict is None:
        return None
    line = verdict.critical_issue if isinstance(verdict, RepairVerdict) else verdict.optimisation
    return f"{verdict.mode}: {line}"[:200]


def _best_text(state: RunState, deps: Deps) -> str:
    best, base = state.get("best"), state.get("base")
    if best is None:
        return "none yet"
    head = f"code {best['code_hash']} from round {best['round']}, {best.get('speedup') or 0:.2f}x vs eager"
    if base is not None and base.get("code_hash") == best["code_hash"]:
        return head + " (the kernel above)"
    return f"{head}\n```python\n{_source(deps, best)}\n```"


def _history(state: RunState, deps: Deps) -> str:
    records = state.get("history") or []
    if not records:
        return "nothing yet"
    lines = []
    for r in records[-deps.history_window:]:
        speed = f", {r['speedup']:.2f}x vs eager" if r.get("speedup") else ""
        tried = f" after '{r['verdict']}'" if r.get("verdict") else ""
        lines.append(f"- round {r['round']} ({r['mode']}{tried}): code {r.get('code_hash') or '-'} "
                     f"{r['status']}{speed}; {r['outcome']}")
    hashes = " ".join(dict.fromkeys(r["code_hash"] for r in records if r.get("code_hash")))
    text = "\n".join(lines) + f"\nAll kernels tried (code hashes): {hashes or 'none'}"
    last = records[-1]
    if last.get("status") == "duplicate":
        text += (f"\nYour last reply (round {last['round']}) resubmitted code {last['code_hash']} unchanged, "
                 "which was already evaluated (see above). Write a changed kernel; the same code again "
                 "is not evaluated and counts as a wasted round.")
    return text


def _notify(deps: Deps, what: str) -> None:
    if deps.notify is not None:
        deps.notify(what)
