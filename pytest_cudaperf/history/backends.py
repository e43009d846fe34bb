"""Where a run history lives: an SQLite file (a path) or a PostgreSQL database (a
``postgresql://`` URL), behind one small interface.

The store's SQL is written once, with ``?`` placeholders and the syntax both databases share
(``CREATE TABLE IF NOT EXISTS``, ``INSERT … ON CONFLICT``, ``ALTER TABLE … ADD COLUMN``); a
backend supplies what differs: the placeholder, the type of an auto-numbered key, how a
transaction starts and how schema changes are serialised (SQLite takes the file's write lock at
``BEGIN IMMEDIATE``; PostgreSQL holds a transaction-scoped advisory lock), the driver and its
errors. Both run in autocommit mode with explicit ``BEGIN``/``COMMIT``, so a transaction is exactly
what the store brackets. Every driver error becomes a :class:`HistoryError` of one line naming the
file or the URL (its password left out).

PostgreSQL needs the ``psycopg`` driver (version 3), the ``postgres`` extra: it is imported only
when a URL is opened.
"""

from __future__ import annotations

import re
import sqlite3
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: how long a writer waits for another to finish its run (seconds; SQLite's busy timeout)
BUSY_TIMEOUT_S = 30.0
#: how long opening a PostgreSQL connection may take (seconds; a URL's own ``connect_timeout``
#: wins)
CONNECT_TIMEOUT_S = 10
#: the schemes of a PostgreSQL URL (libpq's two)
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: the advisory lock that serialises schema creation and migration on a PostgreSQL server
_SCHEMA_LOCK = 0x6375_6461_7065_7266  # "cudaperf"
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

#: one row of a result: a tuple of plain values
Row = tuple[Any, ...]


class HistoryError(RuntimeError):
    """The store cannot be opened, read or written: the message says which file or URL and why,
    in one line."""


def is_url(target: str) -> bool:
    """Does ``target`` name a database by URL (``scheme://…``) rather than a file path?"""
    return _URL.match(target) is not None


def redacted(url: str) -> str:
    """``url`` without its password (in the authority or as a ``password=`` parameter)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", parts.query)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def located(target: str, base: Path) -> str | Path:
    """A ``--cudaperf-history`` value: a URL as it is, a path relative to ``base``."""
    return target if is_url(target) else base / target


def shown(target: str | Path) -> str:
    """How error lines name a history: its path, or its URL without the password."""
    return redacted(target) if isinstance(target, str) and is_url(target) else str(target)


#: the first bytes of every SQLite database file
SQLITE_HEADER = b"SQLite format 3\x00"


def not_a_history(path: Path) -> str | None:
    """Why an existing, non-empty file at ``path`` cannot be a history (it is no SQLite
    database), checked before any test runs; None where it can, or where there is none."""
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError:
        return None  # none there, or unreadable: unwritable() says which
    if head and head != SQLITE_HEADER:
        return "exists and is not an SQLite history file"
    return None


def target_problem(target: str) -> str | None:
    """What is wrong with a history URL before anything is written (its scheme, the driver), or
    None; a path is checked as a file (:func:`pytest_cudaperf.paths.unwritable`) by the caller."""
    if not is_url(target):
        return None
    try:
        _postgres_url(target)
        _driver(target)
    except HistoryError as exc:
        return str(exc)
    return None


def _postgres_url(target: str) -> str:
    found = _URL.match(target)
    scheme = found.group(1).lower() if found else ""
    if scheme not in POSTGRES_SCHEMES:
        raise HistoryError(
            f"{redacted(target)}: unsupported URL scheme {scheme!r}: a history is an SQLite file "
            "path or a postgresql:// URL"
        )
    return target


def _driver(target: str) -> Any:
    try:
        import psycopg
    except ImportError:
        raise HistoryError(
            f"{redacted(target)}: a PostgreSQL history needs the psycopg driver: "
            "pip install pytest-cudaperf[postgres]"
        ) from None
    return psycopg


def first_line(exc: BaseException) -> str:
    """An exception's message as one line (libpq's messages run over several)."""
    lines = [" ".join(line.split()) for line in str(exc).splitlines() if line.strip()]
    return "; ".join(dict.fromkeys(lines)) or type(exc).__name__


class Database(ABC):
    """One open connection to a history database."""

    #: what error lines name: the file, or the URL without its password
    where: str
    #: the column type of an auto-numbered primary key
    serial: str
    #: the driver's errors, which :meth:`guard` turns into a :class:`HistoryError`
    errors: tuple[type[BaseException], ...]

    @abstractmethod
    def execute(self, sql: str, params: Sequence[object] = ()) -> tuple[list[Row], int]:
        """Run one statement (``?`` placeholders): its rows (none for a statement without a
        result) and the count of rows it changed."""

    @abstractmethod
    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """Run one statement once per parameter row."""

    @abstractmethod
    def begin(self, schema: bool = False) -> None:
        """Start a transaction; ``schema``: one that creates or migrates the tables (serialised
        with every other such transaction)."""

    @abstractmethod
    def table_exists(self, name: str) -> bool: ...

    @abstractmethod
    def close(self) -> None: ...

    @contextmanager
    def transaction(self, schema: bool = False) -> Iterator[None]:
        """``BEGIN`` … ``COMMIT``, rolled back when the block raises."""
        self.begin(schema)
        try:
            yield
        except BaseException:
            self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")

    @contextmanager
    def guard(self, doing: str) -> Iterator[None]:
        """A driver error in the block becomes one line: ``{where}: {doing} ({why})``."""
        try:
            yield
        except self.errors as exc:
            raise HistoryError(f"{self.where}: {doing} ({first_line(exc)})") from None


class SqliteBackend(Database):
    """An SQLite file in write-ahead-log mode, writers waiting up to :data:`BUSY_TIMEOUT_S`."""

    serial = "INTEGER PRIMARY KEY"
    errors = (sqlite3.Error,)

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        if path.is_dir():
            raise HistoryError(f"{path}: is a folder; give the history a file path")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryError(f"{path}: cannot create its folder ({exc.strerror})") from None
        try:
            self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{path}: not a cudaperf history ({exc})") from None

    def execute(self, sql: str, params: Sequence[object] = ()) -> tuple[list[Row], int]:
        cursor = self._db.execute(sql, tuple(params))
        return [tuple(r) for r in cursor.fetchall()], cursor.rowcount

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self._db.executemany(sql, [tuple(r) for r in rows])

    def begin(self, schema: bool = False) -> None:
        self.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first write

    def table_exists(self, name: str) -> bool:
        found, _ = self.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        )
        return bool(found)

    def close(self) -> None:
        self._db.close()


class PostgresBackend(Database):
    """A PostgreSQL database named by a ``postgresql://`` URL (libpq's form: user, password,
    host or ``?host=/socket/folder``, port, database)."""

    serial = "BIGSERIAL PRIMARY KEY"

    def __init__(self, url: str) -> None:
        self.where = redacted(url)
        psycopg = _driver(_postgres_url(url))
        self.errors = (psycopg.Error,)
        options: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in url:
            options["connect_timeout"] = CONNECT_TIMEOUT_S
        try:
            self._db = psycopg.connect(url, **options)
        except psycopg.Error as exc:
            raise HistoryError(f"{self.where}: cannot connect ({first_line(exc)})") from None

    def execute(self, sql: str, params: Sequence[object] = ()) -> tuple[list[Row], int]:
        cursor = self._db.execute(sql.replace("?", "%s"), tuple(params))
        rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        return rows, int(cursor.rowcount)

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        with self._db.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), [tuple(r) for r in rows])

    def begin(self, schema: bool = False) -> None:
        self.execute("BEGIN")
        if schema:  # concurrent CREATE TABLE IF NOT EXISTS can collide in the catalogue
            self.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))

    def table_exists(self, name: str) -> bool:
        found, _ = self.execute(
            "SELECT 1 FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (name,),
        )
        return bool(found)

    def close(self) -> None:
        self._db.close()


def connect(target: str | Path) -> Database:
    """The backend of ``target``: a ``postgresql://`` URL, else an SQLite file path."""
    if isinstance(target, str) and is_url(target):
        return PostgresBackend(target)
    return SqliteBackend(Path(target))
