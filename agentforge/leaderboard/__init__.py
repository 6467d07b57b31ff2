"""Leaderboard runs at scale: suites, metrics, runner, reports (docs/leaderboard.md)."""
