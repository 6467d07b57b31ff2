"""`ResultsStore`: open a database by URL (migrating it), write evaluations and runs, read them back.

Writes are idempotent: an evaluation is keyed by its job key (see leaderboard.runner.job_key),
so a job that a retried worker reports twice, or a resumed run that re-submits it, is stored
once. A run is keyed by (entry, suite, task).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from agentforge.evaluator.result import EvalResult
from agentforge.store.migrations import SchemaTooNew, current_version, migrate
from agentforge.store.models import Entry, Evaluation, Run, SuiteTask

_SQLITE_DAMAGED = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
URL_HINT = "set --results-url or AGENTFORGE_RESULTS_URL (e.g. sqlite:///results/agentforge.db)"


class StoreError(RuntimeError):
    """The results store cannot be opened or read; the message says which store and what to do."""


def describe_error(exc: BaseException, url: str | None = None) -> str:
    """One line for a database failure: the driver's own words, without SQLAlchemy's SQL dump."""
    store = f"the results store {_safe(url)}" if url else "the results store"
    reason = str(exc.orig) if isinstance(exc, DBAPIError) and exc.orig is not None else str(exc)
    reason = reason.strip().splitlines()[0] if reason.strip() else type(exc).__name__
    code = getattr(getattr(exc, "orig", None), "sqlite_errorcode", None)
    if code in _SQLITE_DAMAGED:
        return (f"{store} is damaged or not a database ({reason}); move the file away to start a new store, "
                f"or {URL_HINT}")
    return f"{store} failed: {reason}; check it is reachable, or {URL_HINT}"


def _safe(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


@dataclass(frozen=True)
class StoredEvaluation:
    """One stored evaluation: the indexed columns, and the EvalResult parsed on demand."""

    job_key: str
    entry: str
    suite: str
    task: str
    sample: int
    track: str
    status: str
    accepted: bool
    speedup: float | None
    speedup_vs_compile: float | None
    sol_fraction: float | None
    n_flags: int
    code_hash: str
    gpu: str | None
    evaluator_version: str
    created_at: datetime
    result_json: str

    @property
    def result(self) -> EvalResult:
        return EvalResult.from_json(self.result_json)


@dataclass(frozen=True)
class StoredRun:
    entry: str
    suite: str
    task: str
    status: str
    cost_usd: float
    tokens: int
    minutes: float
    best_code_hash: str | None
    summary: dict[str, Any]


@dataclass(frozen=True)
class StoredEntry:
    name: str
    kind: str
    provider: str | None
    model: str | None
    meta: dict[str, Any]


class ResultsStore:
    """The leaderboard's database. `ResultsStore(url)` opens it and applies pending migrations."""

    def __init__(self, url: str, *, base_dir: Path | None = None, echo: bool = False):
        """Raises StoreError (one line: which store, why, what to set) when `url` cannot be
        parsed, its driver is missing, or the database cannot be opened and migrated."""
        try:
            self.url = _resolve_sqlite_path(url, base_dir)
            self.engine = sa.create_engine(self.url, echo=echo, future=True)
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise StoreError(f"results_url {url!r} is not a database URL this install can open ({exc}); "
                             f"{URL_HINT}") from exc
        except ImportError as exc:
            raise StoreError(f"results_url {_safe(url)} needs a database driver that is not installed "
                             f"({exc}); install it, or {URL_HINT}") from exc
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        try:
            migrate(self.engine)
        except SchemaTooNew as exc:
            self.engine.dispose()
            raise StoreError(str(exc)) from exc
        except (SQLAlchemyError, OSError) as exc:
            self.engine.dispose()
            raise StoreError(describe_error(exc, self.url)) from exc
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    # ----- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return current_version(self.engine)

    # ----- entries and suites ---------------------------------------------------------------
    def ensure_entry(
        self, name: str, *, kind: str, provider: str | None = None, model: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        """The id of entry `name`, creating it on first use."""
        with self._session() as s:
            found = s.scalar(sa.select(Entry.id).where(Entry.name == name))
            if found is not None:
                return found
            s.add(Entry(name=name, kind=kind, provider=provider, model=model, meta=meta or {},
                        created_at=_now()))
            try:
                s.commit()
            except IntegrityError:  # another writer created it first
                s.rollback()
            return s.scalar(sa.select(Entry.id).where(Entry.name == name))  # type: ignore[return-value]

    def entries(self) -> list[StoredEntry]:
        with self._session() as s:
            rows = s.scalars(sa.select(Entry).order_by(Entry.name)).all()
            return [StoredEntry(r.name, r.kind, r.provider, r.model, dict(r.meta)) for r in rows]

    def register_suite(self, suite: str, tasks: Iterable[tuple[str, int | None, str | None]]) -> None:
        """Record the tasks of a suite (name, level, source hash); known ones are kept."""
        with self._session() as s:
            known = set(s.scalars(sa.select(SuiteTask.name).where(SuiteTask.suite == suite)))
            for name, level, source_hash in tasks:
                if name not in known:
                    s.add(SuiteTask(suite=suite, name=name, level=level, source_hash=source_hash))
                    known.add(name)
            s.commit()

    def suite_tasks(self, suite: str) -> list[tuple[str, int | None]]:
        with self._session() as s:
            query = sa.select(SuiteTask.name, SuiteTask.level).where(SuiteTask.suite == suite)
            rows = s.execute(query.order_by(SuiteTask.id)).all()
            return [(name, level) for name, level in rows]

    def suites(self) -> list[str]:
        with self._session() as s:
            return list(s.scalars(sa.select(SuiteTask.suite).distinct().order_by(SuiteTask.suite)))

    # ----- evaluations ----------------------------------------------------------------------
    def add_evaluation(
        self, job_key: str, *, entry: str, suite: str, task: str, track: str, result: EvalResult,
        sample: int = 0,
    ) -> bool:
        """Store one result under `job_key`; False (and nothing written) if that key is stored."""
        entry_id = self._entry_id(entry)
        device = result.provenance.device
        row = Evaluation(
            job_key=job_key, entry_id=entry_id, suite=suite, task=task, sample=sample, track=track,
            status=result.status.value, accepted=result.accepted, speedup=result.speedup,
            speedup_vs_compile=result.speedup_vs_compile,
            sol_fraction=result.roofline.sol_fraction if result.roofline else None,
            n_flags=len(result.rejecting_flags), code_hash=result.candidate_hash,
            gpu=device.name if device is not None and device.kind == "cuda" else None,
            evaluator_version=result.provenance.evaluator_version, created_at=_now(),
            result_json=result.to_json(),
        )
        with self._session() as s:
            if s.scalar(sa.select(Evaluation.id).where(Evaluation.job_key == job_key)) is not None:
                return False
            s.add(row)
            try:
                s.commit()
            except IntegrityError:
                s.rollback()
                return False
        return True

    def stored_keys(self, keys: Iterable[str]) -> set[str]:
        """Which of `keys` are already stored (for resuming)."""
        wanted = list(keys)
        found: set[str] = set()
        with self._session() as s:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                found.update(s.scalars(sa.select(Evaluation.job_key).where(Evaluation.job_key.in_(chunk))))
        return found

    def evaluations(
        self, *, entry: str | None = None, suite: str | None = None, track: str | None = None,
    ) -> list[StoredEvaluation]:
        query = sa.select(Evaluation, Entry.name).join(Entry, Entry.id == Evaluation.entry_id)
        if entry is not None:
            query = query.where(Entry.name == entry)
        if suite is not None:
            query = query.where(Evaluation.suite == suite)
        if track is not None:
            query = query.where(Evaluation.track == track)
        with self._session() as s:
            rows = s.execute(query.order_by(Evaluation.id)).all()
            return [_stored(ev, name) for ev, name in rows]

    def boards(self) -> list[tuple[str, str, str]]:
        """Every (entry, suite, track) with at least one evaluation."""
        query = (
            sa.select(Entry.name, Evaluation.suite, Evaluation.track)
            .join(Entry, Entry.id == Evaluation.entry_id).distinct()
        )
        with self._session() as s:
            return sorted((a, b, c) for a, b, c in s.execute(query).all())

    # ----- runs -----------------------------------------------------------------------------
    def record_run(
        self, *, entry: str, suite: str, task: str, status: str, cost_usd: float = 0.0, tokens: int = 0,
        minutes: float = 0.0, best_code_hash: str | None = None, summary: dict[str, Any] | None = None,
    ) -> None:
        """Insert or replace the run of `entry` on `task` in `suite`."""
        entry_id = self._entry_id(entry)
        with self._session() as s:
            key = (Run.entry_id == entry_id, Run.suite == suite, Run.task == task)
            run = s.scalar(sa.select(Run).where(*key))
            if run is None:
                run = Run(entry_id=entry_id, suite=suite, task=task, created_at=_now())
                s.add(run)
            run.status, run.cost_usd, run.tokens, run.minutes = status, cost_usd, tokens, minutes
            run.best_code_hash, run.summary = best_code_hash, summary or {}
            s.commit()

    def runs(self, *, entry: str | None = None, suite: str | None = None) -> list[StoredRun]:
        query = sa.select(Run, Entry.name).join(Entry, Entry.id == Run.entry_id)
        if entry is not None:
            query = query.where(Entry.name == entry)
        if suite is not None:
            query = query.where(Run.suite == suite)
        with self._session() as s:
            return [
                StoredRun(name, r.suite, r.task, r.status, r.cost_usd, r.tokens, r.minutes, r.best_code_hash,
                          dict(r.summary))
                for r, name in s.execute(query.order_by(Run.id)).all()
            ]

    # ----- internals ------------------------------------------------------------------------
    def _entry_id(self, name: str) -> int:
        with self._session() as s:
            found = s.scalar(sa.select(Entry.id).where(Entry.name == name))
        if found is None:
            raise KeyError(f"no entry {name!r} in the results store; call ensure_entry first")
        return found


def _stored(ev: Evaluation, entry: str) -> StoredEvaluation:
    return StoredEvaluation(
        job_key=ev.job_key, entry=entry, suite=ev.suite, task=ev.task, sample=ev.sample, track=ev.track,
        status=ev.status, accepted=ev.accepted, speedup=ev.speedup, speedup_vs_compile=ev.speedup_vs_compile,
        sol_fraction=ev.sol_fraction, n_flags=ev.n_flags, code_hash=ev.code_hash, gpu=ev.gpu,
        evaluator_version=ev.evaluator_version, created_at=ev.created_at, result_json=ev.result_json,
    )


def _now() -> datetime:
    return datetime.now(UTC)


def _resolve_sqlite_path(url: str, base_dir: Path | None) -> str:
    """A relative SQLite path is taken from `base_dir` (default: the working directory), and
    its folder is created, so the default `sqlite:///results/agentforge.db` just works."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return url
    path = Path(parsed.database)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    path.parent.mkdir(parents=True, exist_ok=True)
    return parsed.set(database=str(path)).render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")  # several local writers (resumed runs, report)
    cursor.close()


def session_for(store: ResultsStore) -> Session:
    """A raw ORM session, for ad-hoc queries in notebooks and tests."""
    return store._session()


__all__: Sequence[str] = ("ResultsStore", "StoreError", "StoredEntry", "StoredEvaluation", "StoredRun", "session_for")
