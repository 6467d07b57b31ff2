"""ORM models of the current schema (the version `migrations.LATEST` produces).

The migrations create the tables; these classes only read and write them. A test compares the
two so they cannot drift apart.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Entry(Base):
    """One contestant: an optimisation run of a model (`run`) or kernels scored from a folder (`eval`)."""

    __tablename__ = "entries"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    kind: Mapped[str] = mapped_column(sa.String(20))
    provider: Mapped[str | None] = mapped_column(sa.String(100))
    model: Mapped[str | None] = mapped_column(sa.String(200))
    meta: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))


class SuiteTask(Base):
    """Membership of a task in a suite: the denominator of fast_p."""

    __tablename__ = "tasks"
    __table_args__ = (sa.UniqueConstraint("suite", "name", name="uq_tasks_suite_name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    suite: Mapped[str] = mapped_column(sa.String(300))
    name: Mapped[str] = mapped_column(sa.String(300))
    level: Mapped[int | None] = mapped_column()
    source_hash: Mapped[str | None] = mapped_column(sa.String(64))


class Evaluation(Base):
    """One EvalResult (its JSON, verbatim) with the columns the leaderboard filters and sorts on."""

    __tablename__ = "evaluations"
    __table_args__ = (
        sa.Index("ix_evaluations_board", "entry_id", "suite", "track"),
        sa.Index("ix_evaluations_task", "task"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    job_key: Mapped[str] = mapped_column(sa.String(64), unique=True)
    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entries.id"))
    suite: Mapped[str] = mapped_column(sa.String(300))
    task: Mapped[str] = mapped_column(sa.String(300))
    sample: Mapped[int] = mapped_column()
    track: Mapped[str] = mapped_column(sa.String(20))
    status: Mapped[str] = mapped_column(sa.String(30))
    accepted: Mapped[bool] = mapped_column()
    speedup: Mapped[float | None] = mapped_column()
    speedup_vs_compile: Mapped[float | None] = mapped_column()
    code_hash: Mapped[str] = mapped_column(sa.String(64))
    gpu: Mapped[str | None] = mapped_column(sa.String(200))
    evaluator_version: Mapped[str] = mapped_column(sa.String(40))
    created_at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    result_json: Mapped[str] = mapped_column(sa.Text)
    sol_fraction: Mapped[float | None] = mapped_column()
    n_flags: Mapped[int] = mapped_column(default=0)


class Run(Base):
    """One optimisation run of an entry on a task, with what it cost."""

    __tablename__ = "runs"
    __table_args__ = (sa.UniqueConstraint("entry_id", "suite", "task", name="uq_runs_entry_suite_task"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entries.id"))
    suite: Mapped[str] = mapped_column(sa.String(300))
    task: Mapped[str] = mapped_column(sa.String(300))
    status: Mapped[str] = mapped_column(sa.String(30))
    cost_usd: Mapped[float] = mapped_column()
    tokens: Mapped[int] = mapped_column()
    minutes: Mapped[float] = mapped_column()
    best_code_hash: Mapped[str | None] = mapped_column(sa.String(64))
    summary: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
