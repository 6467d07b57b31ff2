"""The wiring of the loop, and nothing else:

    setup -> coder -> static_check -> evaluate -> profile -> keep_best -> budget -> judge -> coder ...
                 \\ no code ----------------------------/        /   \\ (verdict written without
                              \\ static error, repeat -/       stop    the judge) -> coder
                                                              \\-> finish (optional review)

`build_graph(checkpointer, provider, ...)` takes everything from outside, so tests pass fakes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph

from agentforge.agent import nodes
from agentforge.agent.nodes import Deps
from agentforge.agent.state import RunState
from agentforge.llm.base import Provider

NODES = ("setup", "coder", "static_check", "evaluate", "profile", "keep_best", "budget", "judge", "finish")


def build_graph(checkpointer: Any, provider: Provider, **deps: Any) -> Any:
    """The compiled graph; `deps` are the remaining fields of `nodes.Deps`."""
    context = Deps(provider=provider, **deps)
    graph = StateGraph(RunState)
    steps: dict[str, Callable[..., dict[str, Any]]] = {
        "setup": nodes.setup, "coder": nodes.coder, "static_check": nodes.static_check,
        "evaluate": nodes.evaluate, "profile": nodes.profile, "keep_best": nodes.select,
        "budget": nodes.budget, "judge": nodes.judge, "finish": nodes.finish,
    }
    for name, step in steps.items():
        graph.add_node(name, _timed(step, context))
    graph.add_edge(START, "setup")
    graph.add_edge("setup", "coder")
    graph.add_conditional_edges("coder", _after_coder, ["finish", "keep_best", "static_check"])
    graph.add_conditional_edges("static_check", _after_static, ["keep_best", "evaluate"])
    graph.add_edge("evaluate", "profile")
    graph.add_edge("profile", "keep_best")
    graph.add_edge("keep_best", "budget")
    graph.add_conditional_edges("budget", _after_budget, ["finish", "judge", "coder"])
    graph.add_edge("judge", "coder")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=checkpointer)


def _timed(
    step: Callable[[RunState, Deps], dict[str, Any]], deps: Deps,
) -> Callable[[RunState], dict[str, Any]]:
    """The node, adding its own working time to `elapsed_s` (the wall-time budget survives resumes)."""

    @functools.wraps(step)
    def node(state: RunState) -> dict[str, Any]:
        started = time.monotonic()
        update = step(state, deps)
        return {**update, "elapsed_s": time.monotonic() - started}

    return node


def _after_coder(state: RunState) -> str:
    pending = state.get("pending")
    if pending is None:
        return "finish"  # the provider failed for good; stop_reason says why
    return "keep_best" if pending.get("no_code") else "static_check"


def _after_static(state: RunState) -> str:
    pending = state.get("pending") or {}
    skip = pending.get("static_error") or pending.get("duplicate_of") is not None
    return "keep_best" if skip else "evaluate"


def _after_budget(state: RunState) -> str:
    if state.get("stop_reason"):
        return "finish"
    return "judge" if state.get("needs_judge") else "coder"


SEARCH_NODES = ("setup", "propose", "check", "evaluate", "keep_best", "budget", "judge", "finish")


def build_search_graph(checkpointer: Any, provider: Provider, **deps: Any) -> Any:
    """The parallel search (`agent/search.py`): N proposals per round from a beam of K kernels."""
    from agentforge.agent import search
    from agentforge.agent.search import SearchState

    context = Deps(provider=provider, **deps)
    graph = StateGraph(SearchState)
    steps: dict[str, Callable[..., dict[str, Any]]] = {
        "setup": search.setup, "propose": search.propose, "check": search.check, "evaluate": search.evaluate,
        "keep_best": search.keep_best, "budget": search.budget, "judge": search.judge, "finish": search.finish,
    }
    for name, step in steps.items():
        graph.add_node(name, _timed(step, context))  # type: ignore[arg-type]
    graph.add_edge(START, "setup")
    graph.add_edge("setup", "propose")
    graph.add_conditional_edges("propose", _after_propose, ["finish", "check"])
    graph.add_edge("check", "evaluate")
    graph.add_edge("evaluate", "keep_best")
    graph.add_edge("keep_best", "budget")
    graph.add_conditional_edges("budget", _after_search_budget, ["finish", "judge"])
    graph.add_edge("judge", "propose")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=checkpointer)


def _after_propose(state: Any) -> str:
    return "check" if state.get("proposals") else "finish"


def _after_search_budget(state: Any) -> str:
    return "finish" if state.get("stop_reason") else "judge"
