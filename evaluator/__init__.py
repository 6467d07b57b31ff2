"""The evaluator: build, load, correctness, integrity, timing, profile; one EvalResult.

Imports only the standard library, torch and numpy (triton and cupy optional), so that it runs
in a sandbox child on a bare GPU image.
"""

from agentforge.evaluator.result import EvalJob, EvalResult, Stage, Status

__all__ = ["EvalJob", "EvalResult", "Stage", "Status"]
