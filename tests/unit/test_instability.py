from __future__ import annotations

import random

import pytest

from pytest_cudaperf.measure import instability
from pytest_cudaperf.measure.instability import Finding


def _around(level: float, n: int, rel: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, rel)) for _ in range(n)]


def test_rounds_that_disagree_beyond_their_cis_are_named_with_their_medians() -> None:
    # the H100's 4.6 µs reduction: the second round ~20% above the others, each round tight
    rounds = [
        _around(4.6e-3, 80, 0.01, 1),
        _around(5.5e-3, 80, 0.01, 2),
        _around(4.6e-3, 80, 0.01, 3),
    ]
    found = instability.rounds_disagree(rounds)
    assert found is not None
    assert found.reason.startswith("rounds disagree by 20% (4.60 / 5.49 / 4.59 µs)")
    assert found.noise == pytest.approx(0.9 / 4.6, rel=0.05)


def test_rounds_within_their_cis_or_under_the_floor_agree() -> None:
    noisy = [_around(1.0, 20, 0.05, seed) for seed in (1, 2, 3)]  # CIs overlap
    assert instability.rounds_disagree(noisy) is None
    # disjoint CIs but only 0.5% apart: left to the widened CI
    tight = [_around(1.0, 200, 0.0005, 1), _around(1.005, 200, 0.0005, 2)]
    assert instability.rounds_disagree(tight) is None
    assert instability.rounds_disagree([_around(1.0, 20, 0.01, 1)]) is None  # one round


def test_warmup_that_never_settled_carries_its_last_two_medians() -> None:
    found = instability.warmup_unsettled((4.45e-3, 5.34e-3))
    assert found == Finding("warm-up never settled (4.45 → 5.34 µs)", pytest.approx(0.2))
    assert instability.warmup_unsettled(None) is None
    assert instability.warmup_unsettled((182.4e-3, 190.0e-3)) is not None
    assert instability.warmup_unsettled((182.4e-3, 190.0e-3)).reason.endswith("(182 → 190 µs)")  # type: ignore[union-attr]
    assert instability.warmup_unsettled((12.3, 13.0)).reason.endswith("(12.3 → 13.0 ms)")  # type: ignore[union-attr]


def test_two_levels_are_bimodal() -> None:
    samples = _around(4.5e-3, 140, 0.005, 1) + _around(5.3e-3, 60, 0.005, 2)
    random.Random(0).shuffle(samples)
    found = instability.bimodal(samples)
    assert found is not None
    assert found.reason == "samples are bimodal (4.50 / 5.29 µs, 70% in the lower)"
    # the gap, weighed by how near the smaller mode (30%) is to half: 0.6 of it
    assert found.noise == pytest.approx(0.8 / 4.5 * 0.6, rel=0.03)
    even = _around(4.5e-3, 100, 0.005, 3) + _around(5.3e-3, 100, 0.005, 4)
    assert instability.bimodal(even).noise == pytest.approx(0.8 / 4.5, rel=0.03)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name",
    ["lognormal", "exponential", "pareto", "normal", "uniform"],
)
def test_unimodal_samples_are_not_bimodal_even_with_a_heavy_tail(name: str) -> None:
    rng = random.Random(7)
    draw = {
        "lognormal": lambda: rng.lognormvariate(0.0, 0.6),
        "exponential": lambda: 1.0 + rng.expovariate(3.0),
        "pareto": lambda: rng.paretovariate(1.5),  # infinite variance
        "normal": lambda: rng.gauss(10.0, 0.3),
        "uniform": lambda: rng.uniform(1.0, 1.2),
    }[name]
    for n in (20, 200, 2000):
        assert instability.bimodal([draw() for _ in range(n)]) is None, (name, n)


def test_few_outliers_and_timer_quantisation_are_not_bimodal() -> None:
    # 5% of samples far above: a tail, not a second mode (under 10% on one side)
    assert instability.bimodal(_around(1.0, 190, 0.01, 1) + [2.0] * 10) is None
    # a 2 µs kernel on the 32 ns event tick: two levels 1.6% apart
    assert instability.bimodal([2.016e-3] * 60 + [2.048e-3] * 40) is None
    assert instability.bimodal([1.0] * 5) is None  # too few to say


def test_contention_noise_is_the_share_waited() -> None:
    # the wait itself is subtracted from the samples; what is left is bounded by its share
    found = instability.contention(0.2)
    assert found == Finding("waited for a CPU 20% of the time", pytest.approx(0.2))
    assert instability.contention(0.005) is None
    assert instability.contention(None) is None


def test_oversubscription_is_noise_and_load_counts_only_where_the_wait_is_unknown() -> None:
    # the wait measured or not: under -n 8 on 2 cores unchanged tests read 4x with no wait
    assert instability.oversubscribed(8, 2) == Finding("8 xdist workers on 2 CPU cores", 3.0)
    # a worker on every core is not named: what a slow stretch did shows in the host's speed
    assert instability.oversubscribed(2, 2) is None
    assert instability.oversubscribed(3, 2) == Finding("3 xdist workers on 2 CPU cores", 0.5)
    assert instability.oversubscribed(2, 4) is None
    assert instability.oversubscribed(1, 1) is None
    assert instability.oversubscribed(None, 2) is None
    assert instability.overloaded(3.0, 2, measured=False) == Finding(
        "load average 3.0 on 2 CPU cores", 0.5
    )
    assert instability.overloaded(1.5, 2, measured=False) is None


def test_combine_keeps_every_reason_once_and_the_largest_noise() -> None:
    reasons, noise = instability.combine(
        [Finding("a", 0.1), None, Finding("b", 0.3), Finding("a", 0.1)]
    )
    assert reasons == ("a", "b")
    assert noise == 0.3
    assert instability.combine([None]) == ((), 0.0)


def test_recompiles_are_a_reason_without_noise_of_their_own() -> None:
    assert instability.recompiled(2) == Finding("recompiled 2 times while sampling", 0.0)
    assert instability.recompiled(1) == Finding("recompiled 1 time while sampling", 0.0)
    assert instability.recompiled(0) is None


def test_the_contention_findings_say_so() -> None:
    found = [
        instability.contention(0.3),
        instability.busy_machine(0.6),
        instability.oversubscribed(8, 2),
        instability.overloaded(3.7, 2, measured=True),
    ]
    assert all(f is not None and instability.is_contention(f.reason) for f in found)
    assert instability.busy_machine(0.1) is None
    assert instability.busy_machine(None) is None
    unsettled = instability.warmup_unsettled((4.45e-3, 5.34e-3))
    assert unsettled is not None
    assert not instability.is_contention(unsettled.reason)


def test_host_speed_names_a_slower_or_faster_machine_beyond_its_jitter() -> None:
    slow = instability.host_speed(0.34, 0.17)
    assert slow == Finding(
        "the machine ran a reference loop 2.0x slower than when the baseline was recorded "
        "(340 / 170 µs)",
        pytest.approx(instability.HOST_STRETCH * 1.0),
    )
    fast = instability.host_speed(0.10, 0.17)
    assert fast is not None
    assert "1.7x faster" in fast.reason
    assert fast.noise == pytest.approx(instability.HOST_STRETCH * 0.7)
    # the first loop's ±11% between fresh processes on the quiet machine is not a finding
    assert instability.host_speed(0.19, 0.17) is None
    assert instability.host_speed(0.15, 0.17) is None
    # nothing to compare: an older baseline, another backend, a broken value
    assert instability.host_speed(None, 0.17) is None
    assert instability.host_speed(0.17, None) is None
    assert instability.host_speed(0.0, 0.17) is None
    assert instability.host_speed(float("inf"), 0.17) is None
    assert not instability.is_contention(slow.reason)


@pytest.mark.parametrize(
    ("launches", "median_ms", "noise"),
    [
        (96, 0.2171, 96 * instability.LAUNCH_GAP_US / 217.1),  # kornia's RandomAffine: ±7.5%
        (10, 0.0335, 10 * instability.LAUNCH_GAP_US / 33.5),  # RandomResizedCrop: ±5.1%
        (4, 0.005, None),  # a few launches: not named, however short the call
        (100, 50.0, None),  # long kernels: the gaps are nothing beside them
        (0, 0.2, None),
    ],
)
def test_launch_gaps_are_noise_per_launch_over_the_median(
    launches: float, median_ms: float, noise: float | None
) -> None:
    found = instability.launch_gaps(launches, median_ms)
    if noise is None:
        assert found is None
        return
    assert found is not None
    assert found.noise == pytest.approx(noise)
    assert found.reason.startswith(f"{launches} kernel launches per call: the GPU's gaps")
    # where both sides probed the gap and its difference was set aside: the residual only
    probed = instability.launch_gaps(launches, median_ms, probed=True)
    residual = launches * instability.LAUNCH_GAP_RESIDUAL_US / (median_ms * 1e3)
    if residual < instability.LAUNCH_GAP_MIN:
        assert probed is None
        return
    assert probed is not None
    assert probed.noise == pytest.approx(residual)
    assert "beyond what its probe explains" in probed.reason
