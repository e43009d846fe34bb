from __future__ import annotations

import itertools
import json
import random
import time

import pytest

from pytest_cudaperf.measure.comparison import compare
from pytest_cudaperf.measure.cpu import CpuBackend
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.measure.timing import (
    MAX_COMPILE_WARMUP_BATCHES,
    AdaptiveResult,
    Budget,
    Sampled,
    budget_spent,
    measure,
    over_references,
    run_adaptive,
)


class ScriptedSampler:
    """Batches from a list: a warm-up that settles, then steady samples."""

    def __init__(self, batches: list[list[float]]) -> None:
        self.batches = list(batches)
        self.taken = 0

    def batch(self) -> list[float]:
        self.taken += 1
        return self.batches.pop(0) if self.batches else [1.0] * 5


def test_warmup_runs_until_two_batch_medians_agree() -> None:
    sampler = ScriptedSampler([[9.0] * 5, [3.0] * 5, [1.0] * 5, [1.0] * 5])
    result = run_adaptive(sampler, Budget(warmup=10.0, min_samples=5, precision=0.01))
    assert result.warmup_batches == 4
    assert result.samples[0] == 1.0
    assert result.unsettled is None
    assert result.spent_at is None


def test_budget_warns_when_precision_not_reached() -> None:
    class Noisy:
        def __init__(self) -> None:
            self.rng = random.Random(1)

        def batch(self) -> list[float]:
            return [self.rng.uniform(1.0, 5.0) for _ in range(5)]

    budget = Budget(warmup=0.0, max_time=0.01, precision=0.001)
    result = run_adaptive(Noisy(), budget)
    assert result.spent_at is not None
    assert result.spent_at > 0.001
    assert len(result.samples) >= 3
    line = budget_spent(budget, [result])
    assert line == (
        f"time budget 0.01 s spent at ±{result.spent_at:.2%} precision of the median "
        f"(target ±0.10%, {len(result.samples)} samples)"
    )


def test_rounds_that_ran_out_of_time_make_one_line() -> None:
    def short(spent_at: float | None, n: int) -> AdaptiveResult:
        return AdaptiveResult([1.0] * n, 2, 0.1, spent_at=spent_at)

    budget = Budget(max_time=1 / 3, precision=0.0087)
    rounds = [short(0.1265, 10), short(None, 30), short(0.2303, 12)]
    assert budget_spent(budget, rounds) == (
        "time budget 0.333 s per round spent at ±12.65%…±23.03% precision of the median"
        " in 2 of 3 rounds (target ±0.87%, 10…12 samples)"
    )
    assert budget_spent(budget, [short(0.05, 10)] * 3) == (
        "time budget 0.333 s per round spent at ±5.00% precision of the median"
        " in 3 of 3 rounds (target ±0.87%, 10 samples)"
    )
    assert budget_spent(budget, [short(None, 10)] * 3) is None
    assert budget_spent(budget, [short(0.05, 10)], "in reference loops") == (
        "time budget 0.333 s spent at ±5.00% precision of the median in reference loops"
        " (target ±0.87%, 10 samples)"
    )


def test_a_measurement_out_of_time_in_every_round_says_so_once() -> None:
    rng = random.Random(2)
    budget = Budget(warmup=0.0, max_time=0.03, precision=1e-5, rounds=3)
    m = measure(CpuBackend(), lambda: time.sleep(rng.uniform(0.0005, 0.002)), budget)
    (line,) = [w for w in m.warnings if w.startswith("time budget")]
    assert line.startswith("time budget 0.01 s per round spent at ±")
    assert "precision of the median in 3 of 3 rounds (target ±0.00%" in line


def test_budget_for_tolerance_sets_precision() -> None:
    assert Budget.for_tolerance(0.05).precision == pytest.approx(0.005)
    assert Budget.for_tolerance(0.5).precision == pytest.approx(0.01)
    assert Budget.for_tolerance(0.0).precision == pytest.approx(0.0005)


def test_a_host_bound_budget_aims_at_a_fifth_of_the_host_tolerance_in_loops() -> None:
    from pytest_cudaperf.measure.timing import HOST_MIN_SAMPLES, HOST_TIME_CAP

    budget = Budget.for_tolerance(0.05, host_tolerance=0.10, max_time=1.5, rounds=3)
    assert budget.precision == pytest.approx(0.005)
    assert budget.host_precision == pytest.approx(0.02)
    assert Budget.for_tolerance(0.05).host_precision == pytest.approx(0.01)
    one = budget.per_round()
    assert one.host_precision == pytest.approx(0.02 * 3**0.5)  # relaxed as the precision is
    host = one.host_bound()
    assert host.precision == pytest.approx(one.host_precision)
    assert host.min_samples == HOST_MIN_SAMPLES
    assert host.max_time == pytest.approx(0.5 * HOST_TIME_CAP)


def test_sampling_stops_on_the_precision_of_what_is_judged() -> None:
    """Calls that swing 1 <-> 3 ms with the host while their ratio to the reference holds."""

    class Swinging:
        def __init__(self) -> None:
            self.references: list[float] = []

        def batch(self) -> list[float]:
            self.references += [0.25, 0.75] * 4
            return [1.0, 3.0] * 4

    budget = Budget(warmup=0.0, max_time=0.05, precision=0.01, min_samples=20)
    ms_only = run_adaptive(Swinging(), budget)
    assert ms_only.spent_at is not None  # in ms the median never gets within 1%
    sampler = Swinging()

    def in_loops(taken: list[float]) -> list[float]:
        return over_references(taken, sampler.references[len(sampler.references) - len(taken) :])

    judged = run_adaptive(sampler, budget, judged=in_loops)
    assert judged.spent_at is None
    assert len(judged.samples) == 24  # the first batches past 20 samples: 4 loops each


def test_cpu_sleep_is_about_two_ms() -> None:
    m = measure(CpuBackend(), lambda: time.sleep(0.002), Budget(max_time=0.5))
    assert 1.9 < m.median_ms < 3.5
    assert m.metric == "wall"
    assert m.mode == "wall"
    assert m.n >= 10
    assert m.ci_ms[0] <= m.median_ms <= m.ci_ms[1]


def test_cpu_groups_short_calls() -> None:
    m = measure(CpuBackend(), lambda: None, Budget(max_time=0.2))
    assert m.median_ms < 0.01
    assert any("timed in groups" in w for w in m.warnings)


def test_measurement_round_trips_through_json() -> None:
    m = Measurement.from_samples(
        [1.0, 2.0, 3.0], metric="device", cache="cold", clocks={"recorded": False}, warnings=("x",)
    )
    again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m
    assert again.mode == "device/cold"
    assert "device time, 3 samples, cold L2" in again.describe()


def test_instability_sm_clock_and_recompiles_round_trip() -> None:
    m = Measurement.from_samples(
        [1.0, 2.0, 3.0],
        instability=("rounds disagree by 18% (4.60 / 5.50 / 4.60 µs)", "recompiled 1 time"),
        instability_noise=0.18,
        sm_mhz=1974.5,
        recompiles=1,
    )
    data = json.loads(json.dumps(m.to_dict()))
    assert data["instability"] == list(m.instability)
    assert (data["instability_noise"], data["sm_mhz"], data["recompiles"]) == (0.18, 1974.5, 1)
    assert "peak_bytes" not in data
    assert Measurement.from_dict(data) == m
    assert m.noise == pytest.approx(max(m.rel_halfwidth, 0.18))
    # a payload from before these fields (and with the retired peak_bytes) still loads
    old = {k: v for k, v in data.items() if k not in ("instability", "instability_noise")}
    old["peak_bytes"] = None
    legacy = Measurement.from_dict(old)
    assert (legacy.instability, legacy.instability_noise) == ((), 0.0)


def test_compare_finds_the_faster_callable() -> None:
    comparison = compare(
        CpuBackend(),
        (lambda: time.sleep(0.001), lambda: time.sleep(0.003)),
        Budget(warmup=0.0, max_time=0.3, precision=0.02),
    )
    assert 2.0 < comparison.speedup < 3.5
    assert comparison.ci[0] <= comparison.speedup <= comparison.ci[1]
    assert comparison.rounds >= 3
    assert "speedup" in comparison.describe()


class StatefulBackend:
    """A backend whose every new sampler lands in one of two states, alternating, as small
    cold-L2 kernels did between back-to-back measurements on the H100 (16.4 vs 17.0 µs)."""

    def __init__(self, levels: tuple[float, ...]) -> None:
        self.levels = levels
        self.samplers = 0

    def sampler(self, fn: object, graph: bool) -> ScriptedSampler:
        level = self.levels[self.samplers % len(self.levels)]
        self.samplers += 1
        rng = random.Random(self.samplers)
        return ScriptedSampler([[level * rng.uniform(0.999, 1.001) for _ in range(8)]] * 200)

    def recover(self, sampler: object) -> None:
        pass

    def finish(self, sampler: object, fn: object, sampled: Sampled) -> Measurement:
        return Measurement.from_samples(
            sampled.samples, round_medians_ms=sampled.round_medians_ms, name=sampled.name
        )

    def close(self) -> None:
        pass


def test_rounds_widen_the_ci_to_cover_each_rounds_median() -> None:
    backend = StatefulBackend((1.00, 1.04))
    m = measure(backend, lambda: None, Budget(warmup=0.0, max_time=1.0, rounds=2))  # type: ignore[arg-type]
    assert backend.samplers == 2
    assert len(m.round_medians_ms) == 2
    assert m.round_medians_ms[0] == pytest.approx(1.00, rel=0.002)
    assert m.round_medians_ms[1] == pytest.approx(1.04, rel=0.002)
    # one round alone claims ±0.1%; the two rounds disagree by 4%: the CI says so
    assert m.ci_ms[0] <= 1.001
    assert m.ci_ms[1] >= 1.039
    assert m.rel_halfwidth > 0.015
    single = measure(StatefulBackend((1.0,)), lambda: None, Budget(warmup=0.0, rounds=1))  # type: ignore[arg-type]
    assert single.round_medians_ms == ()
    assert single.rel_halfwidth < 0.005


def test_rounds_at_two_levels_make_the_measurement_unstable() -> None:
    # the H100's 4.6 µs reduction: the second round ~20% above the others
    backend = StatefulBackend((4.6e-3, 5.5e-3, 4.6e-3))
    m = measure(backend, lambda: None, Budget(warmup=0.0, max_time=0.3, rounds=3))  # type: ignore[arg-type]
    assert m.instability[0].startswith("rounds disagree by 20% (4.60 / 5.50 / 4.60 µs)")
    assert any(r.startswith("samples are bimodal") for r in m.instability)
    assert m.instability_noise == pytest.approx(0.9 / 4.6, rel=0.01)
    steady = measure(StatefulBackend((1.0,)), lambda: None, Budget(warmup=0.0, rounds=3))  # type: ignore[arg-type]
    assert steady.instability == ()
    assert steady.instability_noise == 0.0


def test_a_warmup_that_never_settles_is_instability() -> None:
    class Climbing:
        def __init__(self) -> None:
            self.level = 1.0

        def batch(self) -> list[float]:
            self.level *= 1.1
            return [self.level] * 5

    ticks = iter(range(10_000))
    result = run_adaptive(Climbing(), Budget(warmup=3.0, max_time=5.0), clock=lambda: next(ticks))
    assert result.unsettled is not None
    before, after = result.unsettled
    assert after == pytest.approx(before * 1.1)


class FakeCompiles:
    """A compile watch that reports compiling for the first ``busy`` batches and
    ``during_sampling`` compiles between the start and the end of sampling."""

    def __init__(self, busy: int, during_sampling: int = 0) -> None:
        self.busy = busy
        self.calls = 0
        self.count = 0
        self.during_sampling = during_sampling

    def changed(self) -> bool:
        self.calls += 1
        return self.calls <= self.busy

    def compiles(self) -> int:
        self.count += self.during_sampling  # asked once before sampling, once after
        return self.count


def test_warmup_goes_on_while_torch_compile_compiles() -> None:
    sampler = ScriptedSampler([])  # steady from the first batch
    watch = FakeCompiles(busy=4)
    result = run_adaptive(sampler, Budget(warmup=0.0, max_time=0.01), compiles=watch)  # type: ignore[arg-type]
    # four compiling batches, then two that agree
    assert result.warmup_batches == 6
    assert result.recompiles == 0
    endless = run_adaptive(
        ScriptedSampler([]),
        Budget(warmup=0.0, max_time=0.01),
        compiles=FakeCompiles(busy=10_000, during_sampling=1),  # type: ignore[arg-type]
    )
    assert endless.warmup_batches == MAX_COMPILE_WARMUP_BATCHES + 2  # bounded
    assert endless.recompiles == 1


def test_per_round_budget_splits_time_and_samples() -> None:
    budget = Budget(min_time=0.2, max_time=1.0, min_samples=10, precision=0.01, rounds=2)
    one = budget.per_round()
    assert (one.min_time, one.max_time, one.min_samples, one.rounds) == (0.1, 0.5, 5, 1)
    assert one.precision == pytest.approx(0.01 * 2**0.5)
    assert Budget(rounds=1).per_round() == Budget(rounds=1)


def test_l2_flush_without_triton_reads_with_torch_sum() -> None:
    """On this CPU machine the Triton kernels cannot run: the flush falls back to torch.sum,
    says so, and its buffer is a whole number of discard programs' lines."""
    torch = pytest.importorskip("torch")
    from pytest_cudaperf.measure.cuda import L2Flush

    flush = L2Flush(torch, torch.device("cpu"), l2_bytes=3 << 20)
    assert flush.method == "torch.sum"
    assert flush.n * 4 >= 8 << 20  # at least 8 MiB, twice a small L2
    assert flush.n % (L2Flush.DISCARD_BLOCK * L2Flush.FLOATS_PER_LINE) == 0
    flush()  # reads the buffer
    assert float(flush._out) == flush.n


def test_sync_dry_run_once_per_callable_and_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_cudaperf.measure import cuda as cuda_timing

    dry_runs: list[object] = []

    def dry_run(torch_mod: object, fn: object, sleep: object, cycles: float) -> bool:
        dry_runs.append(fn)
        return False

    monkeypatch.setattr(cuda_timing, "_synchronizes", dry_run)
    backend = cuda_timing.CudaBackend.__new__(cuda_timing.CudaBackend)  # no CUDA here
    backend.torch, backend.cycles_per_ms, backend._synchronizing = None, 1.0, []  # type: ignore[assignment]
    backend.sleep = lambda cycles: None
    backend.warnings = []

    def first() -> None:
        pass

    def second() -> None:
        pass

    assert [backend.synchronizes(f) for f in (first, first, second, first)] == [False] * 4
    assert dry_runs == [first, second]  # one dry run per callable, not per round
    # a blocker that timed out: the next round of the same callable samples unblocked at once
    sampler = cuda_timing.CudaEventSampler.__new__(cuda_timing.CudaEventSampler)
    sampler.run, sampler.graph, sampler.blocker = first, False, object()  # type: ignore[assignment]
    backend.recover(sampler)
    assert sampler.blocker is None
    assert backend.synchronizes(first) is True
    assert len(dry_runs) == 2


def test_spin_mhz_from_cycle_and_nanosecond_pairs() -> None:
    from pytest_cudaperf.measure.cuda import spin_mhz

    # 19800 cycles in 10 µs: 1980 MHz; a slot without time (not spun) is skipped
    assert spin_mhz([19800, 10000, 0, 0, 33000, 20000]) == [1980.0, 1650.0]


def test_without_triton_the_sleep_kernel_blocks_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    torch = pytest.importorskip("torch")
    from pytest_cudaperf import measure
    from pytest_cudaperf.measure import cuda as cuda_timing

    monkeypatch.setitem(sys.modules, "pytest_cudaperf.measure._spin", None)  # Triton missing
    # where Triton is installed and _spin was imported already, the package keeps it as an
    # attribute, which `from pytest_cudaperf.measure import _spin` finds first (failed on the
    # H200 host, 2026-11-24)
    monkeypatch.delattr(measure, "_spin", raising=False)
    warnings: list[str] = []
    blocker = cuda_timing._make_blocker(
        torch, torch.device("cpu"), lambda cycles: None, 1.0, warnings
    )
    assert isinstance(blocker, cuda_timing.SleepBlocker)
    assert blocker.sm_mhz() == []
    assert len(warnings) == 1
    assert warnings[0].startswith("spin blocker unavailable (ModuleNotFoundError")
    assert warnings[0].endswith("used torch.cuda._sleep")


def test_torch_compile_warms_up_and_counts_recompiles_while_sampling() -> None:
    """A real torch.compile(backend="eager") callable whose input shape changes once sampling
    is under way: the measurement names the recompilation and counts it."""
    torch = pytest.importorskip("torch")
    import sys

    def work(x: object) -> object:
        return (x * 2).sum()  # type: ignore[operator, attr-defined]

    compiled = torch.compile(work, backend="eager")
    assert "torch._dynamo" in sys.modules  # torch.compile imported it, not the plugin
    small, large = torch.ones(8), torch.ones(16)
    switch_at: list[float] = []

    def call() -> None:
        # the first call compiles; 0.1 s after it (warm-up takes a few ms) the shape changes
        x = small if not switch_at or time.perf_counter() < switch_at[0] else large
        compiled(x)
        if not switch_at:
            switch_at.append(time.perf_counter() + 0.1)

    m = measure(
        CpuBackend(environ={}), call, Budget(warmup=0.0, min_time=0.4, max_time=0.6, rounds=1)
    )
    assert m.recompiles >= 1
    assert any(r.startswith("recompiled") and r.endswith("while sampling") for r in m.instability)

    steady = torch.compile(lambda x: (x + 1).sum(), backend="eager")
    quiet = measure(
        CpuBackend(environ={}),
        lambda: steady(small),
        Budget(warmup=0.0, max_time=0.1, rounds=2),
    )
    assert quiet.recompiles == 0  # its first compile fell in the warm-up
    assert not any(r.startswith("recompiled") for r in quiet.instability)


class Ticks:
    """A nanosecond clock that moves only when told: ``step`` per reading, or what ``then``
    says for the reading's index."""

    def __init__(self, steps: list[int]) -> None:
        self.steps = steps
        self.now = 0
        self.read = 0

    def __call__(self) -> int:
        self.now += self.steps[self.read % len(self.steps)]
        self.read += 1
        return self.now


@pytest.mark.parametrize(("name", "adds"), [("launch_reference", 8), ("launch_wake", 1)])
def test_the_launch_reference_and_its_wake_add_tiny_tensors_on_the_device_and_wait(
    monkeypatch: pytest.MonkeyPatch, name: str, adds: int
) -> None:
    import torch

    from pytest_cudaperf.measure import hostbound

    waited: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)  # no GPU here: the CPU stands in
    out = getattr(hostbound, name)(torch, torch.device("cpu"))()
    assert torch.equal(out, torch.full((4,), 1.0 + adds))
    assert waited == [torch.device("cpu")]
    if name == "launch_reference":
        assert adds == hostbound.LAUNCH_CALLS


def test_the_host_sampler_wakes_the_launch_path_before_the_reference_is_timed() -> None:
    from pytest_cudaperf.measure.hostbound import HostSampler

    events: list[str] = []
    ticks = iter(range(0, 10**9, 1_000_000))

    def clock() -> int:
        events.append("clock")
        return next(ticks)

    sampler = HostSampler(
        lambda: events.append("call"),
        lambda: events.append("sync"),
        reference=lambda: events.append("reference"),
        wake=lambda: events.append("wake"),
    )
    sampler.ns_clock = clock
    sampler.batch()
    assert events[:7] == ["wake", "clock", "reference", "clock", "call", "sync", "clock"]
    assert events.count("wake") == events.count("reference") == 4


def test_the_host_sampler_times_each_call_beside_a_reference_loop() -> None:
    from pytest_cudaperf.measure.hostbound import HostSampler

    calls: list[str] = []
    # per sample three readings: before the loop, between loop and call, after the sync
    clock = Ticks([0, 500_000, 2_000_000])  # the loop 0.5 ms, call + sync 2 ms
    sampler = HostSampler(
        lambda: calls.append("call"),
        lambda: calls.append("sync"),
        reference=lambda: calls.append("loop"),
    )
    sampler.ns_clock = clock
    assert sampler.batch() == pytest.approx([2.0] * 4)
    assert calls[:3] == ["loop", "call", "sync"]
    assert sampler.references == pytest.approx([0.5] * 4)
    assert len(sampler.batch()) == 10  # the next batch aims at 20 ms: 10 calls of 2 ms


def test_a_host_bound_measurement_spends_its_budget_in_seconds() -> None:
    """The host sampler times its calls on a ns clock, while the budget it samples for counts
    seconds: a ns clock taken for the budget's ended every warm-up at its second batch and every
    round once it held three samples."""
    from pytest_cudaperf.measure.hostbound import HostSampler
    from pytest_cudaperf.measure.timing import Budget, run_adaptive

    seconds = [0.0]
    ns = [0]
    durations = itertools.cycle([1.0, 3.0])  # ms a call: a median never precise to 0.01%

    def call() -> None:
        ms = next(durations)
        ns[0] += int(ms * 1e6)
        seconds[0] += ms / 1e3

    sampler = HostSampler(call, lambda: None, reference=lambda: None)
    sampler.ns_clock = lambda: ns[0]
    budget = Budget(warmup=0.01, max_time=0.2, precision=0.0001, min_samples=10)
    found = run_adaptive(sampler, budget, clock=lambda: seconds[0])
    assert found.cost_s >= 0.2
    assert len(found.samples) >= 0.19 / 0.002  # calls of 2 ms on average for 0.2 s
    assert found.spent_at is not None  # the budget ran out, not the precision reached


def test_the_host_sampler_sizes_its_first_batch_by_one_calls_time() -> None:
    from pytest_cudaperf.measure.hostbound import HostSampler, host_batch_size

    def sampler(first_ms: float) -> HostSampler:
        made = HostSampler(lambda: None, lambda: None, reference=lambda: None, first_ms=first_ms)
        made.ns_clock = Ticks([0, 0, 1_000_000])
        return made

    assert len(sampler(0.0).batch()) == 4  # not known: four calls
    assert len(sampler(3.0).batch()) == 4  # short calls: four, not the 6 that fill 20 ms
    assert len(sampler(8.0).batch()) == 2
    assert len(sampler(130.0).batch()) == 2  # a Q-transform's 130 ms: two calls, not four
    assert [host_batch_size(ms) for ms in (0.1, 1.0, 7.0, 500.0)] == [32, 20, 2, 2]


class LoopSampler:
    """A host-bound sampler: batches of 8 calls of 2 ms, each after a reference of 0.5 ms (4
    loops), all ``speed`` times slower."""

    graph = False

    def __init__(self, speed: float = 1.0) -> None:
        self.speed = speed
        self.references: list[float] = []

    def batch(self) -> list[float]:
        self.references = [*self.references, *([0.5 * self.speed] * 8)]
        return [2.0 * self.speed] * 8


class LoopBackend:
    """Samplers that take references: each round's host runs at its own speed (the loop and
    the calls alike), the code's time in loops is 4 throughout."""

    def __init__(self, speeds: tuple[float, ...]) -> None:
        self.speeds = speeds
        self.made = 0
        self.sampled: Sampled | None = None

    def sampler(self, fn: object, graph: bool) -> object:
        speed = self.speeds[self.made % len(self.speeds)]
        self.made += 1
        return LoopSampler(speed)

    def recover(self, sampler: object) -> None:
        pass

    def finish(self, sampler: object, fn: object, sampled: Sampled) -> Measurement:
        self.sampled = sampled
        return Measurement.from_samples(sampled.samples, round_medians_ms=sampled.round_medians_ms)

    def close(self) -> None:
        pass


def test_the_rounds_hand_each_sample_its_reference_and_loops_undo_the_hosts_speed() -> None:
    from pytest_cudaperf.measure.timing import in_loops

    backend = LoopBackend((1.0, 1.6, 1.0))
    m = measure(backend, lambda: None, Budget(warmup=0.0, max_time=0.2, rounds=3))  # type: ignore[arg-type]
    sampled = backend.sampled
    assert sampled is not None
    # the samples, not the warm-up: each round stops at its precision in loops once it has
    # HOST_MIN_SAMPLES (20) calls, three batches of 8
    assert [len(r) for r in sampled.references] == [24, 24, 24]
    assert sum(len(r) for r in sampled.references) == len(sampled.samples)
    assert m.rel_halfwidth > 0.2  # in milliseconds the rounds disagree by 60%
    found = in_loops(sampled)
    assert found is not None
    median, (low, high) = found
    assert median == pytest.approx(4.0)
    assert (low, high) == pytest.approx((4.0, 4.0))  # in loops they agree
    assert in_loops(Sampled([1.0], [], 0.0, None)) is None  # no references: no loops


def test_the_reference_beside_each_kept_sample_is_kept_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_cudaperf.measure import timing

    refs = ((0.1, 0.2, 0.3), (0.4, 0.5))
    sampled = Sampled([1.0, 2.0, 3.0, 4.0, 5.0], [], 0.0, None, (2.0, 4.5), refs)
    assert timing.kept_references(sampled) == (0.1, 0.2, 0.3, 0.4, 0.5)
    monkeypatch.setattr(timing, "MAX_KEPT_SAMPLES", 2)  # as many as samples_ms keeps: the last
    assert timing.kept_references(sampled) == (0.4, 0.5)
    late = Sampled([1.0, 2.0, 3.0], [], 0.0, None, (2.0,), ((0.1, 0.2),))  # a round took none
    assert timing.kept_references(late) == ()
    m = Measurement.from_samples([1.0, 2.0], metric="host", references_ms=(0.1, 0.2))
    assert Measurement.from_dict(m.to_dict()).references_ms == (0.1, 0.2)


def test_rounds_in_loops_that_disagree_widen_the_ci() -> None:
    from pytest_cudaperf.measure.timing import in_loops

    sampled = Sampled([2.0] * 4 + [3.0] * 4, [], 0.0, None, (2.0, 3.0), ((0.5,) * 4, (0.5,) * 4))
    found = in_loops(sampled)
    assert found is not None
    assert found[1][0] <= 4.0
    assert found[1][1] >= 6.0


class LateSyncBackend(LoopBackend):
    """A callable whose dry run drew a call that did not synchronize: its second round, behind
    the blocker, times out; the backend knows it synchronizes from then on."""

    def __init__(self) -> None:
        super().__init__((1.0,))
        self.kinds: list[str] = []
        self.recovered: list[bool] = []
        self.known = False

    def sampler(self, fn: object, graph: bool) -> object:
        from pytest_cudaperf.measure.timing import SynchronizesInside

        if self.known:
            self.kinds.append("host")
            return LoopSampler()
        self.kinds.append("blocked")
        late = len(self.kinds) == 2

        class Blocked:
            graph = False

            def batch(self) -> list[float]:
                if late:
                    raise SynchronizesInside("the stream blocker timed out")
                return [1.0] * 8

        return Blocked()

    def recover(self, sampler: object, restart: bool = False) -> None:
        self.recovered.append(restart)
        self.known = True


def test_a_callable_found_to_synchronize_late_is_measured_host_bound_from_the_first_round() -> None:
    backend = LateSyncBackend()
    m = measure(backend, lambda: None, Budget(warmup=0.0, max_time=0.2, rounds=3))  # type: ignore[arg-type]
    assert backend.recovered == [True]
    # two blocked samplers (the second timed out), then three host-bound rounds from scratch
    assert backend.kinds == ["blocked", "blocked", "host", "host", "host"]
    sampled = backend.sampled
    assert sampled is not None
    assert len(sampled.references) == 3  # every round in reference loops: one series
    assert set(sampled.samples) == {2.0}  # nothing of the blocked round kept
    assert m.median_ms == pytest.approx(2.0)
