"""A 5,000-line compiler failure keeps its first error: the verdict's log is cut to a few KB, and a
plain tail would hold only the last of thousands of follow-on errors. Real g++ on a real source."""

from __future__ import annotations

import pytest
from agentforge.evaluator import build_cache
from agentforge.evaluator.worker.loading import LOG_TAIL_CHARS, keep_first_error, load_candidate

BROKEN = '''
from agentforge.evaluator.native import load_cpp

SOURCE = "extern \\"C\\" void f(float* y) {\\n  undeclared_first_thing(y);\\n" + \\
    "".join(f"  missing_{i}(y);\\n" for i in range(2500)) + "}\\n"
_lib = load_cpp("many_errors", SOURCE, openmp=False)

class ModelNew:
    pass
'''


def test_a_long_build_failure_keeps_its_first_error(tmp_path: pytest.TempPathFactory) -> None:
    build_cache.set_cache_root(str(tmp_path))
    outcome = load_candidate(BROKEN, "cpu", False, "sm_90a", module_name="agentforge_candidate_first_error")
    assert outcome.compile_failed
    for kept in (outcome.compile.log_tail, outcome.error.traceback_tail):
        assert len(kept) <= LOG_TAIL_CHARS + 200
        assert "undeclared_first_thing" in kept, kept[:500]
        assert "missing_2499" in kept  # and the tail is still there


def test_short_logs_are_kept_whole() -> None:
    assert keep_first_error("a\nerror: b\n") == "a\nerror: b\n"
