"""The loop's small parts: verdict parsing, prompt rendering, the artifact store, stop rules."""

from __future__ import annotations

import pytest

from agentforge.agent import prompts
from agentforge.agent.artifacts import ArtifactStore
from agentforge.agent.budget import stop_reason
from agentforge.agent.schemas import (
    OptimiseVerdict,
    RepairVerdict,
    VerdictError,
    fallback_verdict,
    parse_verdict,
    verdict_from_dict,
    verdict_to_dict,
)
from agentforge.settings import AgentSettings


def test_parse_verdicts_strictly():
    reply = ('Draft:\n```json\n{"mode": "repair"}\n```\nFinal:\n```json\n{"mode": "repair", '
             '"critical_issue": "off by one", "why_it_matters": "reads past the end", "smallest_fix": "i < n"}\n```')
    verdict = parse_verdict(reply, "repair")
    assert verdict == RepairVerdict("off by one", "reads past the end", "i < n")
    opt = parse_verdict('```json\n{"bottleneck": "dram", "evidence": ["dram 92%"], "optimisation": "fuse", '
                        '"plan": ["a", "b"]}\n```', "optimise")
    assert isinstance(opt, OptimiseVerdict) and opt.plan == ("a", "b")
    assert verdict_from_dict(verdict_to_dict(opt)) == opt
    for bad, why in [("no block", "no ```json"), ("```json\n{oops\n```", "does not parse"),
                     ('```json\n{"mode": "optimise"}\n```', "asked for a repair"),
                     ('```json\n{"critical_issue": "", "why_it_matters": "x", "smallest_fix": "y"}\n```',
                      "critical_issue")]:
        with pytest.raises(VerdictError, match=why):
            parse_verdict(bad, "repair")
    fallback = fallback_verdict("repair", "malformed", "Status: compile_error\nerror: x")
    assert fallback.malformed == "malformed" and "compile_error" in fallback.critical_issue


def test_prompts_render_every_variable_and_version_by_content():
    text = prompts.render("judge_system")
    assert "judge" in text
    with pytest.raises(KeyError, match="needs"):
        prompts.render("coder_initial", round=1)
    with pytest.raises(KeyError, match="known"):
        prompts.render("nope")
    assert prompts.version("coder_system") != prompts.version("judge_system")
    assert len(prompts.version("coder_system", "backend_cpu")) == 12


def test_artifacts_are_content_addressed(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.put_text("hello")
    assert store.put_text("hello") == ref and store.get_text(ref) == "hello"
    assert store.get_json(store.put_json({"a": 1})) == {"a": 1}
    with pytest.raises(ValueError):
        store.path("../etc/passwd")


def test_stop_rules_in_order():
    limits = AgentSettings(max_rounds=5, max_cost_usd=1.0, max_minutes=2.0, plateau_rounds=2, sol_stop=0.9)
    assert stop_reason({"round": 1}, limits) is None
    assert stop_reason({"round": 5}, limits).startswith("rounds")
    assert stop_reason({"round": 2}, limits, planned_rounds=2).startswith("rounds: every")
    assert stop_reason({"round": 1, "usage": {"cost_usd": 1.5}}, limits).startswith("cost")
    assert stop_reason({"round": 1, "elapsed_s": 121}, limits).startswith("time")
    assert stop_reason({"round": 1, "flat_rounds": 2}, limits) is None  # no best yet: keep trying
    assert stop_reason({"round": 1, "flat_rounds": 2, "best": {"speedup": 1.0}}, limits).startswith("plateau")
    assert stop_reason({"round": 1, "best": {"sol_fraction": 0.93}}, limits).startswith("speed of light")
