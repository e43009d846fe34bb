from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_cudaperf.measure import cpu
from pytest_cudaperf.measure.cpu import CpuBackend, WaitMeter, parse_schedstat
from pytest_cudaperf.measure.timing import Budget, measure


def test_parse_schedstat_reads_cpu_time_and_run_queue_wait() -> None:
    assert parse_schedstat("602773471 272210553 85\n") == (602773471, 272210553)
    assert parse_schedstat("0 0 1") == (0, 0)
    assert parse_schedstat("") is None
    assert parse_schedstat("not a schedstat") is None


def test_read_schedstat_is_none_where_the_file_is_missing() -> None:
    assert cpu.read_schedstat("/nonexistent/schedstat") is None


class ScriptedStat:
    """schedstat readings and a clock that advance by fixed steps per reading."""

    def __init__(self, wait_step: int, wall_step: int) -> None:
        self.wait = 0
        self.now = 0
        self.wait_step, self.wall_step = wait_step, wall_step

    def read(self) -> tuple[int, int]:
        self.wait += self.wait_step
        return (0, self.wait)

    def clock(self) -> int:
        self.now += self.wall_step
        return self.now


def test_wait_meter_sums_the_wait_over_the_batches_wall_time() -> None:
    stat = ScriptedStat(wait_step=25, wall_step=100)
    meter = WaitMeter(stat.read, stat.clock)
    for _ in range(3):
        meter.begin()
        meter.end()
    assert meter.waited() == pytest.approx(0.25)
    meter.reset()
    assert meter.waited() is None


def test_wait_meter_without_schedstat_knows_nothing() -> None:
    meter = WaitMeter(lambda: None)
    meter.begin()
    meter.end()
    assert meter.waited() is None
    assert meter.available is False


def _backend(waited: float | None, environ: dict[str, str]) -> CpuBackend:
    if waited is None:
        meter = WaitMeter(lambda: None)
    else:
        stat = ScriptedStat(wait_step=int(waited * 1000), wall_step=1000)
        meter = WaitMeter(stat.read, stat.clock)
    return CpuBackend(meter=meter, environ=environ)


def test_measured_contention_is_instability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "load_average", lambda: 0.0)
    m = measure(_backend(0.2, {}), lambda: time.sleep(0.0005), Budget(warmup=0.0, max_time=0.05))
    assert any(r.startswith("waited for a CPU") for r in m.instability)
    assert m.instability_noise >= 0.2  # the share waited, read between the batches' readings
    assert m.noise == pytest.approx(max(m.rel_halfwidth, m.instability_noise))


def test_a_samples_own_run_queue_wait_is_subtracted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holding the core is not the code's time: 1 ms of run-queue wait per
    timed group comes off a 3 ms call."""
    waits = iter(range(0, 10**12, 1_000_000))
    meter = WaitMeter(lambda: (0, next(waits)))
    ticks = iter(range(0, 10**15, 3_000_000))  # each timed call reads 3 ms
    monkeypatch.setattr(cpu.time, "perf_counter_ns", lambda: next(ticks))
    sampler = cpu.CpuSampler(lambda: None, per_batch=5, meter=meter)
    sampler._calibrated = True  # one call per sample
    assert sampler.batch() == [2.0] * 5


def test_long_calls_come_fewer_to_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch aims at 0.1 s: five calls of up to 20 ms, two of 50 ms, one of 0.5 s (the
    warm-up's two batches then cost two calls, not ten)."""
    assert cpu.calls_per_batch(0.001, 5) == 5
    assert cpu.calls_per_batch(0.02, 5) == 5
    assert cpu.calls_per_batch(0.05, 5) == 2
    assert cpu.calls_per_batch(0.5, 5) == 1
    assert cpu.calls_per_batch(0.0, 5) == 5
    ticks = iter(range(0, 10**15, 60_000_000))  # each timed call reads 60 ms
    monkeypatch.setattr(cpu.time, "perf_counter_ns", lambda: next(ticks))
    sampler = cpu.CpuSampler(lambda: None)
    assert sampler.batch() == [60.0, 60.0]
    assert sampler.group == 1


def test_oversubscribed_xdist_widens_the_noise_measured_wait_or_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu, "load_average", lambda: 0.0)
    monkeypatch.setattr(cpu, "usable_cores", lambda: 2)
    env = {"PYTEST_XDIST_WORKER_COUNT": "8"}
    budget = Budget(warmup=0.0, max_time=0.02, rounds=1)
    for waited in (None, 0.0):  # no schedstat; schedstat with no wait
        m = measure(_backend(waited, env), lambda: None, budget)
        # (a loaded machine may add its own findings about the samples: bimodal, rounds)
        assert m.instability[0] == "8 xdist workers on 2 CPU cores"
        assert m.instability_noise >= 3.0


def test_a_calm_machine_has_no_cpu_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "load_average", lambda: 0.1)
    findings = cpu.contention_findings(0.001, None, 2, 0.1)
    assert [f for f in findings if f is not None] == []
    assert cpu.xdist_workers({"PYTEST_XDIST_WORKER_COUNT": "x"}) is None
    assert cpu.usable_cores() >= 1


def test_a_re_measurement_starts_its_wait_from_zero() -> None:
    stat = ScriptedStat(wait_step=500, wall_step=1000)
    backend = CpuBackend(meter=WaitMeter(stat.read, stat.clock), environ={})
    budget = Budget(warmup=0.0, max_time=0.02, rounds=1)
    measure(backend, lambda: None, budget)
    stat.wait_step = 0
    again = measure(backend, lambda: None, budget)
    assert not any("waited" in r for r in again.instability)


@pytest.mark.skipif(cpu.read_schedstat() is None, reason="no /proc/thread-self/schedstat")
def test_busy_competitors_show_as_run_queue_wait() -> None:
    """Real contention: twice as many busy processes as usable cores make the sampling thread
    wait in the run queue, and the measurement says so."""
    competitors = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(2 * cpu.usable_cores() + 1)
    ]
    try:
        time.sleep(0.2)  # let them start spinning

        def busy() -> None:
            sum(range(20_000))

        m = measure(
            CpuBackend(environ={}), busy, Budget(warmup=0.0, min_time=0.2, max_time=0.3, rounds=1)
        )
    finally:
        for process in competitors:
            process.kill()
        for process in competitors:
            process.wait()
    assert any(r.startswith("waited for a CPU") for r in m.instability), m.instability
    assert m.instability_noise > 0.05


def test_parse_proc_stat_reads_the_machines_busy_and_total_ticks() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    line = "cpu  100 5 20 800 10 1 2 12 0 0\ncpu0 50 2 10 400 5 0 1 6 0 0\n"
    assert cpu.parse_proc_stat(line) == (140, 950)
    assert cpu.parse_proc_stat("cpu0 1 2 3 4 5") is None
    assert cpu.parse_proc_stat("cpu  a b c d e") is None
    assert cpu.parse_proc_stat("") is None
    assert cpu.read_machine_ticks("/nonexistent/stat") is None


class ScriptedMachine:
    """/proc/stat readings and this process's CPU time, advancing by fixed steps per reading."""

    def __init__(self, busy_step: int, all_step: int, own_step_ns: int) -> None:
        self.busy = self.all = self.own = 0
        self.busy_step, self.all_step, self.own_step_ns = busy_step, all_step, own_step_ns

    def ticks(self) -> tuple[int, int]:
        self.busy += self.busy_step
        self.all += self.all_step
        return (self.busy, self.all)

    def own_cpu_ns(self) -> int:
        self.own += self.own_step_ns
        return self.own


def test_machine_meter_counts_what_other_processes_used() -> None:
    """One window from the first batch to the question: 50 busy ticks of 100, 20 of them this
    process's own (0.2 s at 100 Hz): others 30%."""
    scripted = ScriptedMachine(busy_step=50, all_step=100, own_step_ns=200_000_000)
    meter = cpu.MachineMeter(scripted.ticks, scripted.own_cpu_ns, hz=100)
    assert meter.others() is None  # no batch yet
    for _ in range(3):
        meter.begin()  # only the first batch opens the window
    assert scripted.busy == 50
    assert meter.others() == pytest.approx(0.30)
    meter.reset()
    assert meter.others() is None
    # this process's own time is never counted as somebody else's, even beyond the busy ticks
    alone = ScriptedMachine(busy_step=10, all_step=100, own_step_ns=500_000_000)
    solo = cpu.MachineMeter(alone.ticks, alone.own_cpu_ns, hz=100)
    solo.begin()
    assert solo.others() == 0.0
    missing = cpu.MachineMeter(lambda: None)
    missing.begin()
    assert missing.others() is None


def test_a_busy_machine_is_contention_on_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "load_average", lambda: 0.0)
    scripted = ScriptedMachine(busy_step=60, all_step=100, own_step_ns=0)
    stat = ScriptedStat(wait_step=0, wall_step=1000)
    meter = WaitMeter(stat.read, stat.clock, cpu.MachineMeter(scripted.ticks, scripted.own_cpu_ns))
    m = measure(
        CpuBackend(meter=meter, environ={}), lambda: None, Budget(warmup=0.0, max_time=0.02)
    )
    assert "other processes used 60% of the machine's CPU time" in m.instability
    # at least the busy machine's share: on a loaded runner the no-op's own rounds may disagree
    # more (the noise is the largest finding's; CI read 0.95 once)
    assert m.instability_noise >= 0.60 - 1e-9
    quiet = ScriptedMachine(busy_step=3, all_step=100, own_step_ns=0)
    calm = WaitMeter(stat.read, stat.clock, cpu.MachineMeter(quiet.ticks, quiet.own_cpu_ns))
    m = measure(CpuBackend(meter=calm, environ={}), lambda: None, Budget(warmup=0.0, max_time=0.02))
    assert not any("other processes" in r for r in m.instability)


@pytest.mark.skipif(cpu.read_machine_ticks() is None, reason="no /proc/stat")
def test_busy_processes_show_as_a_busy_machine() -> None:
    """Real competitors, one per core: the measurement names what they used of the machine."""
    competitors = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(cpu.usable_cores())
    ]
    try:
        time.sleep(0.2)
        m = measure(
            CpuBackend(environ={}),
            lambda: sum(range(20_000)),
            Budget(warmup=0.0, min_time=0.3, max_time=0.4, rounds=1),
        )
    finally:
        for process in competitors:
            process.kill()
        for process in competitors:
            process.wait()
    assert any(r.startswith("other processes used") for r in m.instability), (
        m.instability,
        m.to_dict(),
    )


def test_affinity_gives_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The affinity mask where the OS has one (a container's share), else the machine's cores."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3}, raising=False)
    assert cpu.usable_cores() == 2
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert cpu.usable_cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert cpu.usable_cores() == 1


class ScriptedClock:
    """A nanosecond clock whose every other reading (a rep's end) lies ``steps`` further on."""

    def __init__(self, steps: list[int]) -> None:
        self.steps = iter(steps)
        self.now = 0
        self.started = False

    def __call__(self) -> int:
        if self.started:
            self.now += next(self.steps)
        self.started = not self.started
        return self.now


def test_the_reference_probe_keeps_each_points_fastest_rep_and_the_median_point() -> None:
    # three points of three reps: 200/170/180 µs -> 170, 400/350/300 -> 300, 160/190/175 -> 160
    clock = ScriptedClock([200_000, 170_000, 180_000, 400_000, 350_000, 300_000,
                           160_000, 190_000, 175_000])  # fmt: skip
    probe = cpu.ReferenceProbe(work=lambda: None, clock=clock)
    assert probe.value() is None
    for _ in range(3):
        probe.point()
    assert probe.points_ms == [0.17, 0.3, 0.16]
    assert probe.value() == pytest.approx(0.17)
    probe.reset()
    assert probe.value() is None
    # the loop's sum and one for each scattered read of the written (not zero-page) buffer
    expected = sum(i * i for i in range(cpu.REFERENCE_LOOP)) + cpu.REFERENCE_READS
    assert cpu.reference_work() == expected


def test_a_cpu_measurement_carries_the_reference_loops_time_a_gpu_wall_time_does_not() -> None:
    budget = Budget(warmup=0.0, max_time=0.02, rounds=3)
    backend = CpuBackend(meter=WaitMeter(lambda: None), environ={})
    m = measure(backend, lambda: None, budget)
    assert m.reference_ms is not None
    assert m.reference_ms > 0
    assert len(backend.probe.points_ms) == 4  # each round's start and the end
    again = measure(backend, lambda: None, budget)  # a re-measurement starts afresh
    assert len(backend.probe.points_ms) == 4
    assert again.reference_ms is not None
    gpu_wall = CpuBackend(device="cuda:0", meter=WaitMeter(lambda: None), environ={})
    assert measure(gpu_wall, lambda: None, budget).reference_ms is None
    assert gpu_wall.probe.points_ms == []


def test_a_cpu_callable_is_measured_with_the_threads_asked_for_and_they_are_set_back() -> None:
    """The CPU backend holds torch's intra-op threads at its count while it measures, records
    the count on the measurement, and sets the process's back; ``0`` (auto) leaves them."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    seen: list[int] = []

    def work() -> None:
        seen.append(torch.get_num_threads())

    budget = Budget(warmup=0.0, max_time=0.01, min_samples=3, rounds=1)
    one = measure(CpuBackend(threads=1), work, budget)
    assert set(seen) == {1}
    assert one.threads == 1
    assert torch.get_num_threads() == before
    seen.clear()
    auto = measure(CpuBackend(threads=0), work, budget)
    assert set(seen) == {before}
    assert auto.threads == before
    gpu_wall = measure(CpuBackend(threads=1, device="cuda:0", sync=lambda: None), work, budget)
    assert gpu_wall.threads is None  # code that runs on a GPU keeps the process's threads
    assert torch.get_num_threads() == before


def test_the_threads_are_set_back_when_the_callable_raises() -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()

    def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        measure(CpuBackend(threads=1 if before != 1 else 2), broken, Budget(rounds=1))
    assert torch.get_num_threads() == before


def test_intra_op_threads_never_imports_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with cpu.intra_op_threads(1) as held:
        assert held is None
    assert "torch" not in sys.modules
