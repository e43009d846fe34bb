"""The run history on a real PostgreSQL server, started for this module: runs added once (from
two writers at once too), the tables created and a schema-1 store migrated by the tool,
regressions and acks, ``--since`` a commit, ``cudaperf history ingest`` and
``--cudaperf-history`` with a URL, and each connection error in one line.

The server is a throwaway cluster (``initdb`` into a temporary folder, ``pg_ctl start`` on a free
port, stopped at the end), run as ``nobody`` when the tests run as root (``initdb`` refuses
root). Without the server's binaries or the ``psycopg`` driver the module skips, saying what to
install.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from history_reports import IDENT, fill, run_report, shas, stepped_pair

from pytest_cudaperf.cli import main
from pytest_cudaperf.history.regressions import regressions
from pytest_cudaperf.history.store import Confirmation, HistoryError, Source, open_store
from pytest_cudaperf.report.document import write_report


def _bindir() -> Path | None:
    """The folder of the newest installed server's initdb, pg_ctl and postgres."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    on_path = shutil.which("initdb")
    candidates = [*reversed(found), *([Path(on_path).resolve().parent] if on_path else [])]
    try:
        done = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=False
        )
        candidates.append(Path(done.stdout.strip()))
    except OSError:
        pass
    for folder in candidates:
        if all((folder / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(args: list[str]) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.fail(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")


@dataclasses.dataclass(frozen=True)
class Server:
    port: int
    socket_dir: Path

    def url(self, db: str, password: str = "secret") -> str:
        return f"postgresql://cudaperf:{password}@127.0.0.1:{self.port}/{db}"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    psycopg = pytest.importorskip(
        "psycopg",
        reason="the psycopg driver is not installed: pip install pytest-cudaperf[postgres]",
    )
    bindir = _bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server (initdb, pg_ctl): apt-get install postgresql")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="cudaperf-pg-"))
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to nobody
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        as_user = [runuser, "-u", "nobody", "--"]
    data, port = root / "data", _free_port()
    options = f"-k {root} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data)]
    _run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--no-sync",
         "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C"]
    )  # fmt: skip
    _run([*pg_ctl, "-l", str(root / "log"), "-o", options, "-w", "start"])
    try:
        with psycopg.connect(
            host=str(root), port=port, user="postgres", dbname="postgres", autocommit=True
        ) as admin:
            admin.execute("CREATE ROLE cudaperf LOGIN CREATEDB PASSWORD 'secret'")
        yield Server(port, root)
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def url(server: Server) -> str:
    """A new, empty database's URL."""
    import psycopg

    name = f"h_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.url(name)


def test_runs_are_added_once_with_what_each_series_keeps(url: str) -> None:
    with open_store(url) as store:
        assert store.schema == 3  # the tables were created by the tool
        first = run_report("r1", {"t.py::s": 1.0, "t.py::t": 2.0})
        assert store.add_run(first, Source("c1", True, "main"), "2026-11-01T00:00:00+00:00")
        assert not store.add_run(first, Source("c1"), "2026-11-01T00:00:00+00:00")
        assert store.runs() == 1
        assert len(store.series_ids()) == 2
    with open_store(url) as store:  # opened again: nothing to create
        (point,) = store.points(IDENT)
    assert (point.commit, point.value, point.lo, point.hi) == ("c1", 1.0, 0.99, 1.01)
    assert (point.noise, point.sm_mhz, point.run_id, point.breakdown) == (0.01, 1755.0, "r1", None)


WRITER = """
import sys
sys.path.insert(0, {here!r})
from history_reports import run_report
from pytest_cudaperf.history.store import Source, open_store

added = 0
with open_store({url!r}) as store:
    for i in range(15):
        report = run_report(f"run{{i}}", {{f"t.py::test_{{k}}": 1.0 + k for k in range(50)}})
        added += store.add_run(report, Source(str(i)), f"2026-11-01T00:00:{{i:02d}}")
print(added)
"""


def test_two_writers_at_once_add_each_run_once(url: str) -> None:
    script = WRITER.format(here=str(Path(__file__).parent), url=url)
    writers = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=120)[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0]
    assert sum(int(out) for out in outputs) == 15  # each run added by one of them
    import psycopg

    with psycopg.connect(url) as conn:
        per_run = conn.execute("SELECT count(*) FROM results GROUP BY run").fetchall()
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (15,)
    assert {n for (n,) in per_run} == {50}


SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL UNIQUE,
    recorded_at TEXT NOT NULL, commit_sha TEXT NOT NULL, dirty INTEGER NOT NULL,
    branch TEXT NOT NULL, environment TEXT NOT NULL);
CREATE TABLE results (run BIGINT NOT NULL REFERENCES runs(id), nodeid TEXT NOT NULL,
    name TEXT NOT NULL, series TEXT NOT NULL, device_class TEXT NOT NULL, unit TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL, noise DOUBLE PRECISION NOT NULL, sm_mhz DOUBLE PRECISION,
    verdict TEXT NOT NULL, PRIMARY KEY (run, nodeid, name, series, device_class));
INSERT INTO meta VALUES ('schema', '1');
INSERT INTO runs (run_id, recorded_at, commit_sha, dirty, branch, environment)
    VALUES ('old', '2026-10-01', 'c0', 0, 'main', '{}');
INSERT INTO results VALUES (1, 't.py::s', '', 'time:device/cold', 'GPU X', 'ms', 1.0, 0.01,
    NULL, 'new');
"""


def test_a_schema_1_history_is_migrated_and_a_newer_one_refused(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA_1)
    with open_store(url) as store:
        assert store.schema == 3
        (old,) = store.points(IDENT)
        assert (old.commit, old.value, old.lo, old.breakdown) == ("c0", 1.0, None, None)
        assert store.add_run(run_report("new", {"t.py::s": 1.1}), Source("c1"), "2026-10-02")
        assert [p.value for p in store.points(IDENT)] == [1.0, 1.1]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema'")
    with pytest.raises(HistoryError, match="history schema 4 was written by a newer pytest-cudap"):
        open_store(url)


def test_regressions_and_acks_over_postgresql(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(3)
    fill(url, [(1.1 if i >= 12 else 1.0) * rng.gauss(1, 0.005) for i in range(24)])
    with open_store(url) as store:
        (found,) = regressions(store)
    assert (found.last_good, found.first_bad) == ("c11", "c12")
    assert main(["history", "regressions", url]) == 1
    assert "t.py::s  time:device/cold  step  c11 → c12" in capsys.readouterr().out
    assert main(["history", "ack", url, "t.py::s", "time:device/cold", "c12", "--note", "ok"]) == 0
    assert main(["history", "regressions", url]) == 0
    out = capsys.readouterr().out
    assert "cudaperf history: 1 regression, 1 acknowledged" in out
    assert "secret" not in out  # the URL is shown without its password
    confirmed = Confirmation(found.series, "c12", "c11", "abc", "s", 0.1, 0.08, 0.12, "2026-12")
    with open_store(url) as store:
        store.confirm(dataclasses.replace(confirmed, commit="old"))
        store.confirm(confirmed)
        assert store.confirmations() == [confirmed]
        assert regressions(store)[0].confirmed == confirmed
    assert main(["history", "regressions", url, "--confirmed"]) == 0
    assert "c11 → c12" in capsys.readouterr().out


def test_since_a_commit_over_postgresql(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    commits = shas(30)
    stepped_pair(url, commits)
    with open_store(url) as store:
        everything = regressions(store)
        assert store.since_time("C0DE10") == "2026-11-11T00:00:00+00:00"  # any case, as SQLite
        for since in ("c0de10", commits[10], "2026-11-11"):
            (found,) = regressions(store, since)
            assert (found.series[1], found.first_bad) == ("t.py::late", commits[20])
        with pytest.raises(HistoryError, match=r"--since c0de1 is ambiguous: 10 commits of the"):
            regressions(store, "c0de1")
    assert {r.series[1] for r in everything} == {"t.py::early", "t.py::late"}
    assert main(["history", "regressions", url, "--since", "beef"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudaperf: history: postgresql://cudaperf:***@127.0.0.1:")
    assert err.endswith(
        ": no run of commit beef is in the history (--since takes a commit "
        "recorded in the history or a date such as 2026-11-01)\n"
    )


def test_history_ingest_and_the_plugin_write_to_a_url(
    url: str, tmp_path: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(2):
        report = run_report(f"r{i}", {"t.py::s": 1.0}, f"c{i}", f"2026-11-0{i + 1}")
        write_report(tmp_path / f"r{i}.json", report)
    reports = [str(tmp_path / "r0.json"), str(tmp_path / "r1.json"), str(tmp_path / "r1.json")]
    assert main(["history", "ingest", url, *reports]) == 0
    captured = capsys.readouterr()
    assert "[3/3] " in captured.out
    assert "r1.json: already in the history" in captured.out
    assert "reading [3/3] " in captured.err  # progress while every report is read first
    assert "cudaperf history: 2 runs in postgresql://cudaperf:***@127.0.0.1:" in captured.out
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.perf\ndef test_sum(cuda_timer):\n"
        "    cuda_timer(lambda: sum(range(2000)))\n"
    )
    result = pytester.runpytest(
        "--cudaperf-max-time=0.05", "--cudaperf-device=cpu", f"--cudaperf-history={url}"
    )
    result.assert_outcomes(passed=1)
    with open_store(url) as store:
        assert store.runs() == 3
        assert any(s[1].endswith("::test_sum") for s in store.series_ids())


def test_connection_errors_are_one_line_naming_the_url(server: Server, url: str) -> None:
    database = url.rsplit("/", 1)[1]
    wrong = {
        server.url(database, password="wrong"): 'password authentication failed for user "cudap',
        server.url("missing"): 'database "missing" does not exist',
        f"postgresql://cudaperf:secret@127.0.0.1:{_free_port()}/x": "Connection refused",
        "postgresql://cudaperf:secret@127.0.0.1:notaport/x": "invalid integer value",
    }
    for target, why in wrong.items():
        with pytest.raises(HistoryError) as raised:
            open_store(target)
        message = str(raised.value)
        assert "\n" not in message
        assert message.startswith("postgresql://cudaperf:***@127.0.0.1:")
        assert ": cannot connect (" in message
        assert why in message
        assert "secret" not in message
