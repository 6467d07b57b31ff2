"""The parallel search: N proposals per round from a beam of the best K kernels.

    setup -> propose -> check -> evaluate -> keep_best -> budget -> judge -> propose ...
                 \\ every model call failed -> finish          \\-> finish (optional review)

`propose` asks the coder N times at once (each proposal with its own strategy and temperature,
shared among the beam's entries); `check` runs the static checks; `evaluate` builds and checks
the proposals concurrently and times those that passed one at a time (`batch_eval`); `keep_best`
ranks every accepted kernel, keeps the best and carries the K fastest (or, with none yet, the
failures worth repairing) to the next round; `judge` writes a verdict for each beam entry, at
once. Every model call and every evaluation counts in the run's usage and budgets; the history
holds one record per proposal with its place in the search tree (`node`, `parent`)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

from agentforge.agent import nodes
from agentforge.agent.batch_eval import BatchTimes, evaluate_batch
from agentforge.agent.beam import ROOT, BeamEntry, allocate, beats, rank, speed_key, strategy
from agentforge.agent.nodes import MIN_GAIN, Deps
from agentforge.agent.schemas import RepairVerdict, verdict_to_dict
from agentforge.agent.state import KernelRef, Pending, RoundRecord, add_usage
from agentforge.candidate import Candidate
from agentforge.evaluator.result import Status


class SearchState(TypedDict, total=False):
    run_id: str
    task_ref: str
    task_name: str
    backend: str
    device: str
    round: int  # rounds finished
    beam: list[BeamEntry]  # what the next round's proposals start from
    best: KernelRef | None
    proposals: list[Pending]  # this round's, in flight
    flat_rounds: int
    stop_reason: str | None
    approved: bool | None
    finished: bool
    history: Annotated[list[RoundRecord], operator.add]  # one record per proposal
    batches: Annotated[list[dict[str, Any]], operator.add]  # per round: where the evaluation time went
    usage: Annotated[dict[str, Any], add_usage]
    elapsed_s: Annotated[float, operator.add]


def setup(state: SearchState, deps: Deps) -> dict[str, Any]:
    return {"task_name": deps.task.name, "backend": deps.backend, "round": 0, "beam": [dict(ROOT)],
            "best": None, "proposals": [], "flat_rounds": 0, "stop_reason": None, "approved": None,
            "finished": False}


def _as_loop_state(state: SearchState, entry: BeamEntry) -> dict[str, Any]:
    """The single loop's view of one beam entry, so its prompt renderers serve the search."""
    return {"round": state.get("round", 0), "mode": entry["mode"], "base": entry.get("base"),
            "best": state.get("best"), "verdict_ref": entry.get("verdict_ref"),
            "history": state.get("history") or []}


def _concurrently(calls: list[Callable[[], Any]]) -> list[Any]:
    if len(calls) == 1:
        return [calls[0]()]
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def propose(state: SearchState, deps: Deps) -> dict[str, Any]:
    beam = state.get("beam") or [dict(ROOT)]
    slots = allocate(deps.candidates, beam)
    rnd = state.get("round", 0) + 1

    def call(n: int, entry_index: int, index: int) -> tuple[dict[str, Any], str, float]:
        entry = beam[entry_index]
        what, temperature = strategy(entry["mode"], index)
        update = nodes.coder_call(_as_loop_state(state, entry), deps, temperature=temperature,  # type: ignore[arg-type]
                                  strategy=what, slot=(n + 1, len(slots)))
        return update, what, temperature

    results = _concurrently([lambda n=n, e=e, i=i: call(n, e, i) for n, (e, i) in enumerate(slots)])
    usage: dict[str, Any] = {}
    proposals: list[Pending] = []
    failures = []
    for n, ((update, what, temperature), (entry_index, _)) in enumerate(zip(results, slots, strict=True)):
        usage = add_usage(usage, update.get("usage"))
        pending = update.get("pending")
        if pending is None:
            failures.append(update.get("stop_reason") or "provider failed")
            continue
        pending = dict(pending)
        pending.update(node=f"r{rnd}c{n + 1}", parent=beam[entry_index].get("node"), strategy=what,
                       temperature=temperature, entry=entry_index)
        proposals.append(pending)  # type: ignore[arg-type]
    if not proposals:  # every call failed for good: the run stops, as the single loop does
        return {"proposals": [], "stop_reason": failures[0], "usage": usage}
    return {"proposals": proposals, "usage": usage}


def check(state: SearchState, deps: Deps) -> dict[str, Any]:
    """The single loop's static check per proposal, and no code evaluated twice in a run or a round."""
    seen = {r["code_hash"]: r["round"] for r in state.get("history") or [] if r.get("code_hash")}
    checked = []
    for pending in state.get("proposals") or []:
        pending = dict(pending)
        kernel = pending.get("kernel")
        if kernel is not None and not pending.get("no_code"):
            if kernel["code_hash"] in seen:
                pending["duplicate_of"] = seen[kernel["code_hash"]]
            else:
                error, fix = nodes.check_source(nodes._source(deps, kernel), deps.backend)
                pending["static_error"], pending["static_fix"] = error, fix
                seen[kernel["code_hash"]] = pending["round"]
        checked.append(pending)
    return {"proposals": checked}


def evaluate(state: SearchState, deps: Deps) -> dict[str, Any]:
    proposals = [dict(p) for p in state.get("proposals") or []]
    ready = [p for p in proposals if p.get("kernel") and not p.get("no_code") and not p.get("static_error")
             and p.get("duplicate_of") is None]
    if not ready:
        return {"proposals": proposals}
    candidates = [Candidate.from_dict(deps.store.get_json(p["kernel"]["candidate_ref"])) for p in ready]
    nodes._notify(deps, f"evaluating round {ready[0]['round']}'s candidate in the sandbox" if len(ready) == 1 else
                  f"evaluating {len(ready)} candidates of round {ready[0]['round']} (built and checked at once, "
                  "timed one at a time)")
    times = BatchTimes()
    results = evaluate_batch(deps.task, candidates, deps.evaluate, device=state.get("device") or "cpu",
                             check=deps.check, workers=min(deps.candidates, 8), times=times)
    stop = None
    for pending, result in zip(ready, results, strict=True):
        kernel = dict(pending["kernel"])
        kernel.update(nodes._figures(result), result_ref=deps.store.put_text(result.to_json(indent=1), "json"))
        pending["kernel"] = kernel
        if result.status == Status.TASK_ERROR:
            stop = nodes.task_error_reason(result)
    batch = {"round": ready[0]["round"], "check_s": round(times.check_s, 2), "checked": times.checked,
             "measure_s": round(times.measure_s, 2), "measured": times.measured}
    update: dict[str, Any] = {"proposals": proposals, "batches": [batch],
                              "usage": {"evaluations": times.checked + times.measured}}
    if stop:
        update["stop_reason"] = stop
    return update


def keep_best(state: SearchState, deps: Deps) -> dict[str, Any]:
    """Close the round: the best kernel, the next beam, and one record per proposal."""
    proposals = state.get("proposals") or []
    beam = state.get("beam") or [dict(ROOT)]
    best = state.get("best")
    width = max(1, min(deps.beam_width, deps.candidates))
    carried = [e["base"] for e in beam if e.get("mode") == "optimise" and e.get("base")]
    fresh = [p["kernel"] for p in proposals if p.get("kernel") and p["kernel"].get("accepted")]
    ranked = rank([*carried, *fresh])
    improved = bool(ranked) and (best is None or beats(ranked[0], best))  # beyond the noise
    gain = improved and (best is None or speed_key(ranked[0]) > speed_key(best) * (1 + MIN_GAIN))
    best = ranked[0] if improved else best
    kept = {k["code_hash"] for k in ranked[:width]}
    next_beam: list[BeamEntry] = [
        {"node": _node_of(k, proposals, beam), "mode": "optimise", "base": k, "verdict_ref": None,
         "judge_refs": None, "needs_judge": True, "failed_repairs": 0} for k in ranked[:width]]
    repairs = _repairs(proposals, beam, deps, width - len(next_beam))
    next_beam += repairs
    repaired = {e["node"] for e in repairs}
    if not next_beam:
        # Nothing accepted and nothing worth repairing: the last beam again, or a fresh start.
        next_beam = [e for e in beam if e.get("failed_repairs", 0) < deps.limits.max_failed_repairs] or [dict(ROOT)]
    records = [_record(state, deps, p, beam, best, kept, repaired) for p in proposals]
    return {"round": state.get("round", 0) + 1, "beam": next_beam, "best": best, "proposals": [],
            "flat_rounds": 0 if gain else state.get("flat_rounds", 0) + 1, "history": records}


def _node_of(kernel: KernelRef, proposals: list[Pending], beam: list[BeamEntry]) -> str | None:
    for p in proposals:
        if p.get("kernel") and p["kernel"]["code_hash"] == kernel["code_hash"]:
            return p.get("node")  # type: ignore[return-value]
    return next((e.get("node") for e in beam if e.get("base") and e["base"]["code_hash"] == kernel["code_hash"]),
                None)


# Which failures are nearest to a correct kernel, so repaired first when the beam has room.
_NEAR = {"mismatch": 0, "integrity_flag": 1, "runtime_error": 1, "timeout": 2, "crash": 2, "compile_error": 3}


def _repairs(proposals: list[Pending], beam: list[BeamEntry], deps: Deps, room: int) -> list[BeamEntry]:
    """Failed kernels of this round worth a repair while the beam has room, nearest to correct
    first, on lines that have not used up their repairs."""
    failed_ones = []
    for p in proposals:
        kernel = p.get("kernel")
        if kernel is None or kernel.get("accepted") or p.get("duplicate_of") is not None or p.get("no_code"):
            continue
        if kernel.get("status") == Status.TASK_ERROR.value:
            continue
        parent = beam[p.get("entry", 0)]  # type: ignore[call-overload]
        failed = parent.get("failed_repairs", 0) + (1 if parent.get("mode") == "repair" else 0)
        if failed >= max(1, deps.limits.max_failed_repairs):
            continue
        near = 4 if p.get("static_error") else _NEAR.get(str(kernel.get("status")), 3)
        failed_ones.append((near, p, kernel, failed))
    entries: list[BeamEntry] = []
    for _, p, kernel, failed in sorted(failed_ones, key=lambda f: f[0])[:max(0, room)]:
        entry: BeamEntry = {"node": p.get("node"), "mode": "repair", "base": {**kernel}, "verdict_ref": None,
                            "judge_refs": None, "needs_judge": True, "failed_repairs": failed}
        if p.get("static_error"):  # the fix is known without a judge, as in the single loop
            entry["base"] = {**kernel, "status": "static_error"}
            entry["needs_judge"] = False
            entry["verdict_ref"] = deps.store.put_json(verdict_to_dict(RepairVerdict(
                critical_issue=f"the module: {p['static_error']}",
                why_it_matters="nothing can be evaluated until the reply is one complete, valid module",
                smallest_fix=p.get("static_fix") or "answer with one complete module defining `class ModelNew`")))
        entries.append(entry)
    return entries


def _record(state: SearchState, deps: Deps, p: Pending, beam: list[BeamEntry], best: KernelRef | None,
            kept: set[str], repaired: set[Any]) -> RoundRecord:
    kernel = p.get("kernel")
    parent = beam[p.get("entry", 0)]  # type: ignore[call-overload]
    if p.get("no_code"):
        status, outcome = "no_code", "no code in the reply"
    elif p.get("duplicate_of") is not None:
        status, outcome = "duplicate", f"identical to round {p['duplicate_of']}'s code: not evaluated again"
    elif p.get("static_error"):
        status, outcome = "static_error", "rejected by the static check"
    else:
        assert kernel is not None
        status = kernel["status"]
        if kernel.get("accepted"):
            outcome = ("new best" if best and best["code_hash"] == kernel["code_hash"] and
                       best.get("round") == kernel.get("round") else
                       "in the beam" if kernel["code_hash"] in kept else "not kept (outside the beam)")
        else:
            outcome = "failed"
    if p.get("node") in repaired:
        outcome += "; carried to the next round for repair"
    verdict = nodes._verdict_line(_as_loop_state(state, parent), deps)  # type: ignore[arg-type]
    record: RoundRecord = {
        "round": p["round"], "mode": p["mode"], "code_hash": kernel["code_hash"] if kernel else None,
        "status": status, "speedup": kernel.get("speedup") if kernel else None,
        "speedup_vs_compile": kernel.get("speedup_vs_compile") if kernel else None,
        "candidate_us": kernel.get("candidate_us") if kernel else None,
        "best_speedup": best.get("speedup") if best else None, "outcome": outcome, "verdict": verdict,
        "cost_usd": float((state.get("usage") or {}).get("cost_usd", 0)),
        "refs": {"prompt": p.get("prompt_ref"), "reply": p.get("reply_ref"),
                 "candidate": kernel.get("candidate_ref") if kernel else None,
                 "result": kernel.get("result_ref") if kernel else None,
                 "verdict": parent.get("verdict_ref"), "judge": parent.get("judge_refs")},
    }
    record.update({"node": p.get("node"), "parent": p.get("parent"), "strategy": p.get("strategy"),  # type: ignore[typeddict-item]
                   "temperature": p.get("temperature")})
    if p.get("knowledge"):
        record["knowledge"] = p["knowledge"]
    return record


def budget(state: SearchState, deps: Deps) -> dict[str, Any]:
    return nodes.budget(state, deps)  # type: ignore[arg-type]


def judge(state: SearchState, deps: Deps) -> dict[str, Any]:
    """A verdict for every beam entry that needs one, all at once."""
    beam = [dict(e) for e in state.get("beam") or []]
    todo = [i for i, e in enumerate(beam) if e.get("needs_judge") and e.get("base")]
    updates = _concurrently([lambda i=i: nodes.judge(_as_loop_state(state, beam[i]), deps)  # type: ignore[arg-type]
                             for i in todo]) if todo else []
    usage: dict[str, Any] = {}
    for i, update in zip(todo, updates, strict=True):
        beam[i].update(verdict_ref=update["verdict_ref"], judge_refs=update["judge_refs"], needs_judge=False)
        usage = add_usage(usage, update.get("usage"))
    return {"beam": beam, "usage": usage}


def finish(state: SearchState, deps: Deps) -> dict[str, Any]:
    return nodes.finish(state, deps)  # type: ignore[arg-type]
