"""The schema's history, as ordered steps applied when a store is opened.

Why not alembic: the store has a handful of tables, one writer per run, and must upgrade itself
on a teammate's laptop (SQLite) and on a shared PostgreSQL server without anyone running a
separate command. A list of numbered Python steps does that in ~100 lines and is read top to
bottom. Each step:

- is frozen: it spells out the DDL of its own version (never `Base.metadata.create_all` of the
  current models, which move on), so a database created years ago upgrades the same way;
- runs in one transaction (with the other pending steps) together with the row that records it
  in `schema_version` (PostgreSQL has transactional DDL; on SQLite a failed step leaves at worst an added column
  that the step's existence checks tolerate on retry);
- runs under a database-wide lock (`BEGIN IMMEDIATE` on SQLite, a transaction-scoped advisory
  lock on PostgreSQL), taken before the version is read: several processes opening a new
  database at once (parallel `leaderboard eval`s) would otherwise all see version 0 and race
  to create the same tables and version rows;
- is idempotent: it checks what exists before creating or adding, so re-running after a crash
  is safe.

To change the schema: append a step with the next number, update `models.py` to match, and
add a test that upgrades a database stopped at the previous version
(tests/store/test_migrations.py shows how).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _v1_initial(conn: Connection) -> None:
    """Entries, the tasks of each suite, and evaluations with their EvalResult JSON."""
    md = sa.MetaData()
    sa.Table(
        "entries", md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("provider", sa.String(100)),
        sa.Column("model", sa.String(200)),
        sa.Column("meta", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    sa.Table(
        "tasks", md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("suite", sa.String(300), nullable=False),
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("level", sa.Integer),
        sa.Column("source_hash", sa.String(64)),
        sa.UniqueConstraint("suite", "name", name="uq_tasks_suite_name"),
    )
    sa.Table(
        "evaluations", md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_key", sa.String(64), nullable=False, unique=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entries.id"), nullable=False),
        sa.Column("suite", sa.String(300), nullable=False),
        sa.Column("task", sa.String(300), nullable=False),
        sa.Column("sample", sa.Integer, nullable=False),
        sa.Column("track", sa.String(20), nullable=False),
        sa.Column("status", sa.String(30), nullable=False),
        sa.Column("accepted", sa.Boolean, nullable=False),
        sa.Column("speedup", sa.Float),
        sa.Column("speedup_vs_compile", sa.Float),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("gpu", sa.String(200)),
        sa.Column("evaluator_version", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("result_json", sa.Text, nullable=False),
        sa.Index("ix_evaluations_board", "entry_id", "suite", "track"),
        sa.Index("ix_evaluations_task", "task"),
    )
    md.create_all(conn, checkfirst=True)


def _v2_runs_sol_flags(conn: Connection) -> None:
    """Optimisation runs with their costs; SoL fraction and flag count as indexed columns,
    backfilled from the stored EvalResult JSON."""
    md = sa.MetaData()
    sa.Table("entries", md, sa.Column("id", sa.Integer, primary_key=True))  # exists since v1; for the key
    sa.Table(
        "runs", md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entries.id"), nullable=False),
        sa.Column("suite", sa.String(300), nullable=False),
        sa.Column("task", sa.String(300), nullable=False),
        sa.Column("status", sa.String(30), nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("minutes", sa.Float, nullable=False),
        sa.Column("best_code_hash", sa.String(64)),
        sa.Column("summary", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("entry_id", "suite", "task", name="uq_runs_entry_suite_task"),
    )
    md.create_all(conn, checkfirst=True)
    existing = {c["name"] for c in sa.inspect(conn).get_columns("evaluations")}
    for name, ddl in (("sol_fraction", "FLOAT"), ("n_flags", "INTEGER NOT NULL DEFAULT 0")):
        if name not in existing:
            conn.execute(sa.text(f"ALTER TABLE evaluations ADD COLUMN {name} {ddl}"))
    rows = conn.execute(sa.text("SELECT id, result_json FROM evaluations")).all()
    for row_id, text in rows:
        data = json.loads(text)
        sol = (data.get("roofline") or {}).get("sol_fraction")
        flags = sum(1 for f in data.get("flags", []) if f.get("severity", "reject") == "reject")
        conn.execute(
            sa.text("UPDATE evaluations SET sol_fraction = :sol, n_flags = :n WHERE id = :id"),
            {"sol": sol, "n": flags, "id": row_id},
        )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "entries, tasks, evaluations", _v1_initial),
    Migration(2, "runs with costs; evaluations.sol_fraction and n_flags", _v2_runs_sol_flags),
)
LATEST = MIGRATIONS[-1].version

_version_table = sa.Table(
    "schema_version", sa.MetaData(),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("description", sa.String(200), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


def current_version(engine: Engine) -> int:
    """The highest applied step; 0 for an empty database."""
    with engine.connect() as conn:
        return _version_on(conn)


def _version_on(conn: Connection) -> int:
    if not sa.inspect(conn).has_table("schema_version"):
        return 0
    found = conn.execute(sa.select(sa.func.max(_version_table.c.version))).scalar()
    return int(found or 0)


class SchemaTooNew(RuntimeError):
    """The database was written by a newer agentforge."""


def _check_not_newer(have: int) -> None:
    if have > LATEST:
        raise SchemaTooNew(
            f"the results store is at schema version {have}, newer than this agentforge "
            f"({LATEST}); upgrade agentforge"
        )


# Any constant: the key of PostgreSQL's advisory lock that serialises migrations of one database.
_PG_LOCK_KEY = 0x61_67_66_6F_72_67_65


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[Connection]:
    """One transaction that holds the database-wide migration lock until it commits."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now, not at the first write
        elif engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        try:
            yield conn
        except BaseException:
            conn.rollback()
            raise
        conn.commit()


def migrate(engine: Engine, target: int = LATEST) -> list[int]:
    """Apply every step above the database's version up to `target`; returns the applied ones.

    Safe to call from several processes at once: one applies the steps, the others wait for
    its lock, then find nothing to do. Raises SchemaTooNew (a RuntimeError) for a database
    newer than this code (an older agentforge must not write into a schema it does not know).
    """
    have = current_version(engine)  # the common case, an up-to-date store, takes no write lock
    _check_not_newer(have)
    if have >= target:
        return []
    applied = []
    with _migration_lock(engine) as conn:
        _version_table.metadata.create_all(conn, checkfirst=True)
        have = _version_on(conn)  # again, under the lock: another process may have migrated
        _check_not_newer(have)
        for step in MIGRATIONS:
            if have < step.version <= target:
                step.apply(conn)
                conn.execute(sa.insert(_version_table).values(
                    version=step.version, description=step.description, applied_at=datetime.now(UTC),
                ))
                applied.append(step.version)
    return applied
