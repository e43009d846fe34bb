from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pytest_cudaperf.locks import LockRegistry

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pytest_cudaperf.locks import LockRegistry
    lock = LockRegistry(Path(sys.argv[1])).get("gpu0")
    mode, seconds = sys.argv[2], float(sys.argv[3])
    if mode == "shared":
        lock.acquire_shared()
        print("held", flush=True)
        time.sleep(seconds)
        lock.release_shared()
    else:
        with lock.exclusive():
            print("held", flush=True)
            time.sleep(seconds)
""")


def _hold(folder: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), mode, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_exclusive_waits_for_shared_holders(tmp_path: Path) -> None:
    other = _hold(tmp_path, "shared", 0.5)
    lock = LockRegistry(tmp_path).get("gpu0")
    began = time.monotonic()
    with lock.exclusive():
        waited = time.monotonic() - began
    other.wait()
    assert waited >= 0.3


def test_shared_holders_do_not_wait_for_each_other(tmp_path: Path) -> None:
    other = _hold(tmp_path, "shared", 1.0)
    lock = LockRegistry(tmp_path).get("gpu0")
    began = time.monotonic()
    lock.acquire_shared()
    lock.release_shared()
    assert time.monotonic() - began < 0.5
    other.kill()
    other.wait()


def test_own_shared_hold_is_upgraded_and_restored(tmp_path: Path) -> None:
    lock = LockRegistry(tmp_path).get("gpu0")
    lock.acquire_shared()
    with lock.exclusive():
        pass
    # still held shared: another process's exclusive must wait until we release
    waiter = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path), "exclusive", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)
    assert waiter.poll() is None
    lock.release_shared()
    assert waiter.wait(timeout=10) == 0


def test_a_dead_holder_releases_its_lock(tmp_path: Path) -> None:
    holder = _hold(tmp_path, "exclusive", 60)
    holder.kill()
    holder.wait()
    lock = LockRegistry(tmp_path).get("gpu0")
    began = time.monotonic()
    with lock.exclusive():
        pass
    assert time.monotonic() - began < 1.0


def _try(folder: Path, within_s: float) -> bool:
    """Whether another process had the device within ``within_s`` (a bounded hold)."""
    code = (
        "import sys; from pathlib import Path; from pytest_cudaperf.locks import LockRegistry\n"
        "with LockRegistry(Path(sys.argv[1])).get('gpu0').exclusive(float(sys.argv[2])) as had:\n"
        "    print(had)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(within_s)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return {"True": True, "False": False}[done.stdout.strip()]


def test_a_bounded_hold_gives_up_at_its_bound(tmp_path: Path) -> None:
    other = _hold(tmp_path, "exclusive", 30.0)  # another process measures
    lock = LockRegistry(tmp_path).get("gpu0")
    began = time.monotonic()
    with lock.exclusive(0.3) as had:
        waited = time.monotonic() - began
    assert not had
    assert 0.25 <= waited < 5.0  # its bound, not the other's 30 s
    other.kill()
    other.wait()
    with lock.exclusive(0.3) as had:  # its holder gone, the device is had at once
        assert had
        assert not _try(tmp_path, 0.1)  # and held inside: no other process has it
    assert _try(tmp_path, 1.0)


def test_a_bounded_hold_not_had_keeps_the_shared_hold(tmp_path: Path) -> None:
    """Shared holders (other tests) keep the device from a bounded hold: not had, the process's
    own shared hold is taken back, so other processes still cannot hold the device alone."""
    other = _hold(tmp_path, "shared", 30.0)
    lock = LockRegistry(tmp_path).get("gpu0")
    lock.acquire_shared()
    with lock.exclusive(0.2) as had:
        assert not had
    other.kill()
    other.wait()
    assert not _try(tmp_path, 0.3)  # our shared hold is back
    lock.release_shared()
    assert _try(tmp_path, 1.0)


def test_a_wait_for_the_host_ends_at_its_limit_while_another_process_measures(
    tmp_path: Path,
) -> None:
    """A wait for the host's state of 1 s, its probes holding the device through the lock, while
    another process measures there for 30 s: it ends at its limit, unread, and says so."""
    from pytest_cudaperf.run.hoststate import HostWait

    other = _hold(tmp_path, "exclusive", 30.0)
    lock = LockRegistry(tmp_path).get("gpu0")
    read: list[float] = []

    def probe() -> float:
        read.append(0.065)
        return 0.065

    wait = HostWait(probe, 1.0, device=lock.exclusive)
    began = time.monotonic()
    waited = wait.until_back(0.130, 0.090)
    took = time.monotonic() - began
    other.kill()
    other.wait()
    assert (waited.back, waited.cut, read) == (False, True, [])
    assert 0.4 <= took < 5.0  # its limit, not the other's 30 s (slack for a loaded machine)
    assert "other processes measured on the device" in waited.describe(0.090)


MEASURE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pytest_cudaperf.locks import LockRegistry
    lock = LockRegistry(Path(sys.argv[1])).get("gpu0")
    lock.acquire_shared()  # the test's cuda_device
    for _ in range(20):
        with lock.exclusive():  # a measurement inside the test
            time.sleep(0.005)
    lock.release_shared()
    print("done", flush=True)
""")


def test_concurrent_measurements_never_deadlock(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MEASURE, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=30)
            assert out.strip() == "done"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


FILE_LOCK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pytest_cudaperf.locks import file_lock
    with file_lock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def test_file_lock_excludes_other_processes(tmp_path: Path) -> None:
    from pytest_cudaperf.locks import file_lock

    path = tmp_path / ".lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", FILE_LOCK, str(path), "0.5"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    began = time.monotonic()
    with file_lock(path):
        waited = time.monotonic() - began
    proc.wait()
    assert waited > 0.2
