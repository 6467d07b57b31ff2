"""The results store: every measurement the leaderboard ranks, in one SQLAlchemy database.

SQLite under `results/` by default; any SQLAlchemy URL (PostgreSQL for a team) by setting
`results_url`. The schema is versioned by a small migration runner (`migrations.py`) that
applies ordered, idempotent steps whenever a store is opened.
"""

from agentforge.store.store import ResultsStore, StoredEvaluation, StoredRun, StoreError, describe_error

__all__ = ["ResultsStore", "StoreError", "StoredEvaluation", "StoredRun", "describe_error"]
