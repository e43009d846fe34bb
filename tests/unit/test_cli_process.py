"""The ``cudaperf`` command's child processes: stopped with every process they started."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_cudaperf import turns
from pytest_cudaperf.cli.process import TERMINATED_EXIT, run_in_session, run_in_turns, stop_group
from pytest_cudaperf.signals import Terminated, sigterm_raises

ROOT = Path(__file__).parents[2]

#: a child that starts a grandchild ignoring SIGTERM, writes the grandchild's pid, and sleeps
CHILD = textwrap.dedent(
    """
    import subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
    open(sys.argv[1], "w").write(str(grandchild.pid))
    time.sleep(60)
    """
)

#: the command's side: waits for CHILD within sigterm_raises, exits as the CLI does
PARENT = textwrap.dedent(
    """
    import sys
    from pytest_cudaperf import signals
    from pytest_cudaperf.cli import process
    process.STOP_GRACE_S = 0.5
    with signals.sigterm_raises():
        try:
            process.run_in_session([sys.executable, "-c", sys.argv[1], sys.argv[2]])
        except signals.Terminated:
            sys.exit(process.TERMINATED_EXIT)
    """
)


def _running(pid: int) -> bool:
    """Is ``pid`` a live process (not gone, not a zombie waiting for its parent)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_stops_the_child_and_what_it_started(tmp_path: Path) -> None:
    """SIGTERM to the command while it waits: the child's whole group is stopped, a grandchild
    that ignores SIGTERM included, and the command exits 143."""
    pid_file = tmp_path / "grandchild.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(pid_file)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the grandchild never started"
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    assert _running(grandchild)
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(30) == TERMINATED_EXIT == 143
    deadline = time.monotonic() + 10
    while _running(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived the command"
        time.sleep(0.05)


def test_a_child_that_ends_gives_its_exit_code() -> None:
    assert run_in_session([sys.executable, "-c", "raise SystemExit(3)"]) == 3


def test_stop_group_kills_what_ignores_sigterm_after_the_grace() -> None:
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    assert run.stdout.readline() == "ready\n"
    began = time.monotonic()
    stop_group(run, grace_s=0.3)
    assert run.returncode == -signal.SIGKILL
    assert time.monotonic() - began < 10
    run.stdout.close()


def test_sigterm_raises_only_within_and_puts_the_handler_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_raises(), pytest.raises(Terminated):
        _terminate_self()
    assert signal.getsignal(signal.SIGTERM) == before


def _terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler raises at the next bytecode: never slept through


def test_sigterm_raises_outside_the_main_thread_sets_no_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def inside() -> None:
        with sigterm_raises():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    assert seen == [before]


#: a run that starts up (sleeps its argv[2] seconds), takes its turn as a pytest run of
#: ``cudaperf record`` does, and "measures": its ready and turn times go to the file argv[1]
TURN_TAKER = textwrap.dedent(
    """
    import os, sys, time
    from pytest_cudaperf import turns
    folder = turns.from_env(os.environ)
    time.sleep(float(sys.argv[2]))
    ready = time.time()
    turns.take_turn(folder)
    began = time.time()
    time.sleep(0.2)
    open(sys.argv[1], "w").write(f"{ready} {began} {time.time()} {turns.ENV in os.environ}")
    sys.exit(int(sys.argv[3]))
    """
)


@pytest.mark.skipif(not turns.AVAILABLE, reason="turns need fcntl")
def test_runs_started_together_measure_in_turns_once_all_are_ready(tmp_path: Path) -> None:
    """Started together, the runs start up side by side; none measures before every one still
    running is ready (the slow starter's 0.6 s), and no two measure at once. Each one's end is
    said with its exit code, and the turn folder is not handed further."""
    starts = [0.0, 0.6, 0.1, 0.0]
    codes = [0, 1, 0, 4]
    ended: list[tuple[int, int]] = []
    began = time.time()
    found = run_in_turns(
        [
            [sys.executable, "-c", TURN_TAKER, str(tmp_path / f"t{i}"), str(start), str(rc)]
            for i, (start, rc) in enumerate(zip(starts, codes, strict=True))
        ],
        tmp_path,
        lambda index, rc, wall, log: ended.append((index, rc)),
    )
    assert found == codes
    assert sorted(ended) == list(enumerate(codes))
    times = [(tmp_path / f"t{i}").read_text().split() for i in range(len(starts))]
    assert all(handed == "False" for *_, handed in times)
    spans = sorted((float(b), float(e)) for _, b, e, _ in times)
    last_ready = max(float(ready) for ready, *_ in times)
    assert spans[0][0] >= last_ready  # nobody measured while another still started up
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert spans[-1][1] - began < 0.6 + 4 * 0.2 + 3.0  # side by side, not one after another


@pytest.mark.skipif(not turns.AVAILABLE, reason="turns need fcntl")
def test_a_run_that_ends_before_it_is_ready_does_not_hold_the_others(tmp_path: Path) -> None:
    """A run that never takes its turn (a usage error before its tests) ends; the others go on."""
    never = [sys.executable, "-c", "import sys; sys.exit(4)"]
    taker = [sys.executable, "-c", TURN_TAKER, str(tmp_path / "t"), "0.2", "0"]
    assert run_in_turns([never, taker], tmp_path) == [4, 0]
    assert (tmp_path / "run-1.log").exists()
