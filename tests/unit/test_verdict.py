from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pytest_cudaperf import series as evidence
from pytest_cudaperf.measure import instability
from pytest_cudaperf.observation import Observation, as_recorded, host_state
from pytest_cudaperf.series import Entry, Recording, entry_of
from pytest_cudaperf.units import format_ms, format_pct, format_value
from pytest_cudaperf.verdict import (
    Kind,
    Verdict,
    budget_failure,
    ci_text,
    confirm,
    fingerprint_differences,
    judge,
    value_uncertainty,
)

ENV = {"torch": "2.11", "cuda": "13.0", "driver": "580", "power_limit_w": 700}


def series(
    *medians: float,
    noise: float = 0.005,
    sm_mhz: float | None = None,
    unit: str = "ms",
    metric: str = "device",
) -> Entry:
    recs = [
        Recording(f"2026-11-{i + 1:02d}", m, noise, 50, sm_mhz=sm_mhz)
        for i, m in enumerate(medians)
    ]
    return entry_of(recs, unit, ENV, metric)


STEADY = series(1.0, 1.0, 1.0)  # three processes that agree: noise 0.5%


def obs(value: float, halfwidth: float = 0.005, **kwargs: object) -> Observation:
    return Observation(value, halfwidth, env=kwargs.pop("env", ENV), **kwargs)  # type: ignore[arg-type]


def test_missing_baseline_is_new() -> None:
    verdict = judge(obs(1.0), None, 0.05, "GPU")
    assert verdict.kind is Kind.NEW


def test_regression_message_says_what_moved() -> None:
    verdict = judge(obs(1.2), STEADY, 0.05, "NVIDIA H100")
    assert verdict.kind is Kind.REGRESSION
    assert verdict.ratio == pytest.approx(1.2)
    assert verdict.message.startswith(
        "perf regression: median 1.200 ms vs baseline 1.000 ms (+20.0%"
    )
    assert "tolerance 5.0%" in verdict.message
    assert "NVIDIA H100; baseline since 2026-11-01 from 3 processes" in verdict.message


def test_within_tolerance_passes_and_large_drop_improves() -> None:
    assert judge(obs(1.03), STEADY, 0.05, "GPU").kind is Kind.PASS
    assert judge(obs(0.8), STEADY, 0.05, "GPU").kind is Kind.IMPROVED


def test_pass_even_when_the_ci_pokes_out() -> None:
    verdict = judge(obs(1.04, halfwidth=0.05), STEADY, 0.05, "GPU")
    assert verdict.ci is not None
    assert verdict.ci[1] > 1.05
    assert verdict.kind is Kind.PASS


def test_point_beyond_the_band_with_a_straddling_ci_is_inconclusive_and_says_why() -> None:
    verdict = judge(obs(1.07, halfwidth=0.04), STEADY, 0.05, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert verdict.message.startswith("inconclusive: ")
    assert "this measurement's CI is ±4.0%" in verdict.message
    assert "a longer --cudaperf-max-time, or a tolerance above 5%" in verdict.message


def test_unstable_measurement_names_the_reason_and_what_to_do() -> None:
    unstable = obs(
        1.07,
        halfwidth=0.01,
        instability_noise=0.03,
        instability=("rounds disagree by 18% (4.6 / 5.5 / 4.6 µs)",),
    )
    assert unstable.noise == pytest.approx(0.03)  # the larger of the two, not their sum
    verdict = judge(unstable, STEADY, 0.05, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert "this measurement was unstable: rounds disagree by 18%" in verdict.message
    assert 'cache="hot" or graph=True' in verdict.message


def test_noisy_series_cannot_support_the_tolerance_never_regression() -> None:
    noisy = series(1.0, 1.13, 0.87)  # moves ±20% between processes
    assert noisy.noise == pytest.approx(0.195)
    verdict = judge(obs(1.15), noisy, 0.05, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert verdict.threshold == pytest.approx(0.195)
    assert "raised to 19.5% by the series' noise" in verdict.message
    assert "cannot support the tolerance 5.0%" in verdict.message
    assert "series moves ±19% between processes (3 recordings)" in verdict.message
    assert "record it again on a quiet machine: cudaperf record" in verdict.message
    # far beyond even the raised threshold: a regression
    assert judge(obs(1.6), noisy, 0.05, "GPU").kind is Kind.REGRESSION
    # within the tolerance asked for: pass
    assert judge(obs(1.03), noisy, 0.05, "GPU").kind is Kind.PASS


def test_the_series_movement_widens_the_band_once_not_also_the_ci() -> None:
    """A 5-process series moving ±22% (the H100's bimodal 5 µs reduction): the band is ±22%, and
    the CI carries only the uncertainty of the series value (22% / sqrt(5)), so a +42% slowdown
    with a tight CI fails (it read INCONCLUSIVE when the movement was counted in both)."""
    wide = series(1.0, 1.1467, 0.8533, 1.0, 1.0)  # noise 1.5 x half the range: 22%
    assert wide.noise == pytest.approx(0.22, abs=1e-3)
    assert value_uncertainty(wide) == pytest.approx(wide.noise / math.sqrt(5))
    verdict = judge(obs(1.42, halfwidth=0.02), wide, 0.05, "GPU")
    assert verdict.kind is Kind.REGRESSION
    assert verdict.threshold == pytest.approx(wide.noise)
    assert verdict.ci is not None
    assert verdict.ci[0] == pytest.approx(1.29, abs=0.01)
    # beyond the band, but not surely: inconclusive; within the tolerance: pass
    assert judge(obs(1.25, halfwidth=0.02), wide, 0.05, "GPU").kind is Kind.INCONCLUSIVE
    assert judge(obs(1.03, halfwidth=0.02), wide, 0.05, "GPU").kind is Kind.PASS
    # a one-process series keeps its whole (floored) noise in the CI
    one = series(1.0)
    assert value_uncertainty(one) == pytest.approx(one.noise)


def test_a_process_state_seen_in_one_recording_is_not_a_regression() -> None:
    """The session-7 false failure, with its recordings: conv1d[64] at 25.03-27.44 µs in four
    processes and 37.24 µs in the fifth, then an unchanged process under ``-n 2`` read 40.79 µs,
    +60.4% with a CI of +38.0%…+86.4%. Judged on the spread alone (±36%) that failed; a recording
    already reached +46%, so it is inconclusive. A 3x slowdown still fails."""
    medians = (0.02508, 0.02543, 0.02744, 0.02503, 0.03724)
    bimodal = series(*medians, metric="wall")
    unchanged = obs(0.04079, halfwidth=0.02)
    spread_only = replace(bimodal, noise=evidence.spread(medians))
    before = judge(unchanged, spread_only, 0.05, "CPU")
    assert before.kind is Kind.REGRESSION
    assert before.ci is not None
    assert before.ci[0] == pytest.approx(1.380, abs=0.001)
    verdict = judge(unchanged, bimodal, 0.05, "CPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert verdict.threshold == pytest.approx(0.03724 / 0.02543 - 1)
    assert "series moves ±46% between processes (5 recordings)" in verdict.message
    assert judge(obs(0.0763, halfwidth=0.02), bimodal, 0.05, "CPU").kind is Kind.REGRESSION


def test_an_inconclusive_verdict_names_where_the_series_noise_comes_from() -> None:
    """``add[4194304]`` in the session-9 CPU A/A: five recordings within 1.18-1.57 ms, each with
    a warm-up that fell from ~9 ms to its level only in its last batch (noise ±413…609%; the
    findings of the four not at the middle of their noise are left out here). The
    series is that noisy because of its recordings' own instability, not because it moves ±549%
    between processes, which the verdict said. A steady CPU series is held at the wall-time
    floor, and says that instead."""
    recs = [
        Recording(
            "2026-11-24",
            1.17658,
            5.48931,
            160,
            unstable=("warm-up never settled (8.10 → 1.25 ms)",),
        ),
        Recording("2026-11-24", 1.28079, 6.09044, 130),
        Recording("2026-11-24", 1.44128, 5.96978, 125),
        Recording("2026-11-24", 1.57167, 4.13032, 110),
        Recording("2026-11-24", 1.29805, 4.68007, 145),
    ]
    unstable = entry_of(recs, "ms", ENV, "wall")
    verdict = judge(obs(4.172, halfwidth=0.03), unstable, 0.05, "CPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert (
        "its recordings were unstable themselves (median ±549%; warm-up never settled"
        " (8.10 → 1.25 ms))" in verdict.message
    )
    assert "between processes" not in verdict.message
    steady = series(1.0, 1.02, 0.99, 1.01, 1.0, metric="wall")
    verdict = judge(obs(1.2, halfwidth=0.02), steady, 0.05, "CPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert (
        "CPU wall time is judged at ±30% at least; the series moves ±2% between processes"
        " (5 recordings)" in verdict.message
    )
    assert verdict.message.endswith(": a tolerance above 30%")  # recording more cannot help


def test_single_process_baseline_says_so() -> None:
    one = series(1.0)
    assert one.noise == 0.03
    verdict = judge(obs(1.045, halfwidth=0.03), one, 0.03, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert "baseline since 2026-11-01 from 1 process;" in verdict.message
    assert "a series of fewer than 3 processes is taken as ±3% at least" in verdict.message
    assert "record 3 processes or more: cudaperf record" in verdict.message
    assert verdict.message.count("1 process") == 1  # no phrase said twice


def test_contention_advice_follows_from_the_contention() -> None:
    """A threshold raised by this run's CPU contention: the advice is a quieter machine, never
    'record more' (the series is not what holds it) and no tolerance (it cannot help)."""
    recorded = series(1.0, 1.0, 1.01, metric="wall")
    busy = "other processes used 63% of the machine's CPU time"
    verdict = judge(obs(1.5, instability=(busy,), instability_noise=0.63), recorded, 0.05, "CPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert "raised to 100.0% by this run's CPU contention" in verdict.message
    assert f"this run shared the CPU: {busy}" in verdict.message
    assert verdict.message.endswith(
        "run it where other processes leave the CPU alone (fewer xdist workers)"
    )
    assert "cudaperf record" not in verdict.message
    assert "tolerance above" not in verdict.message


def test_fingerprint_difference_is_named_and_makes_a_marginal_regression_inconclusive() -> None:
    capped = {**ENV, "power_limit_w": 500}
    marginal = judge(obs(1.08, env=capped), STEADY, 0.05, "GPU")
    assert marginal.kind is Kind.INCONCLUSIVE
    assert marginal.fingerprint == ("power_limit_w 700 → 500",)
    assert "now power_limit_w 700 → 500" in marginal.message
    clear = judge(obs(1.3, env=capped), STEADY, 0.05, "GPU")
    assert clear.kind is Kind.REGRESSION
    assert "now power_limit_w 700 → 500" in clear.message
    assert judge(obs(1.08), STEADY, 0.05, "GPU").kind is Kind.REGRESSION


def test_fingerprint_differences() -> None:
    assert fingerprint_differences(ENV, ENV) == ()
    # a key only one side knows (an older baseline) is not a difference
    assert fingerprint_differences({"torch": "1"}, {"torch": "1", "ecc": True}) == ()
    assert fingerprint_differences({"torch": "1", "date": "a"}, {"torch": "2", "date": "b"}) == (
        "torch 1 → 2",
    )
    nested = fingerprint_differences(
        {"fingerprint": {"mig": "off", "clocks": "1980"}}, {"fingerprint": {"mig": "on"}}
    )
    assert nested == ("mig off → on",)
    # the seed a test's draws started from: another one draws other inputs
    assert fingerprint_differences({"seed": "0"}, {"seed": "off"}) == ("seed 0 → off",)


def test_memory_is_exact_at_the_callers_tolerance() -> None:
    base = series(1024, noise=0.0, unit="bytes", metric="bytes")
    same = judge(Observation(1024, unit="bytes"), base, 0.01, "GPU")
    assert same.kind is Kind.PASS
    more = judge(Observation(2048, unit="bytes"), base, 0.01, "GPU")
    assert more.kind is Kind.REGRESSION
    assert more.message.startswith("memory regression: peak memory 2.0 KiB vs baseline 1.0 KiB")
    assert judge(Observation(512, unit="bytes"), base, 0.01, "GPU").kind is Kind.IMPROVED


def test_memory_against_a_zero_baseline_never_divides() -> None:
    zero = Entry(0, "bytes", 0.0, "2026-11-01", {}, (Recording("2026-11-01", 0, 0.0, 1),))
    assert judge(Observation(0, unit="bytes"), zero, 0.01, "GPU").kind is Kind.PASS
    grew = judge(Observation(10, unit="bytes"), zero, 0.01, "GPU")
    assert grew.kind is Kind.REGRESSION
    assert "baseline is zero" in grew.message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -1.0])
def test_no_verdict_from_a_nonsense_measurement(value: float) -> None:
    verdict = judge(obs(value), STEADY, 0.05, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert "not two finite positive values" in verdict.message


def test_nonsense_baseline_value_never_divides() -> None:
    broken = Entry(0.0, "ms", 0.0, "2026-11-01", {}, (Recording("2026-11-01", 1.0, 0.0, 1),))
    assert judge(obs(1.0), broken, 0.05, "GPU").kind is Kind.INCONCLUSIVE


def test_nan_noise_counts_as_none() -> None:
    verdict = judge(obs(1.2, halfwidth=float("nan"), instability_noise=-1.0), STEADY, 0.05, "GPU")
    assert verdict.kind is Kind.REGRESSION
    assert verdict.ci is not None
    assert all(math.isfinite(c) for c in verdict.ci)


# --- confirmation --------------------------------------------------------------------------------


def test_confirm_leaves_other_verdicts_alone() -> None:
    first = judge(obs(1.0), STEADY, 0.05, "GPU")
    assert confirm(first, obs(2.0), STEADY, "GPU") is first


def test_unconfirmed_regression_is_inconclusive() -> None:
    first = judge(obs(1.2), STEADY, 0.05, "GPU")
    verdict = confirm(first, obs(1.01), STEADY, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert verdict.message.startswith(
        "inconclusive: +20.0% not confirmed, re-measured +1.0% (pass)"
    )


def test_confirmed_regression_without_clocks_stays() -> None:
    first = judge(obs(1.2), STEADY, 0.05, "GPU")
    verdict = confirm(first, obs(1.21), STEADY, "GPU")
    assert verdict.kind is Kind.REGRESSION
    assert verdict.ratio == pytest.approx(1.21)
    assert verdict.cycles_ratio is None


def test_a_re_measurement_elsewhere_is_named_either_way() -> None:
    first = judge(obs(1.2), STEADY, 0.05, "CPU")
    confirmed = confirm(first, obs(1.21), STEADY, "CPU", " in a fresh process")
    assert confirmed.kind is Kind.REGRESSION
    assert confirmed.message.endswith("; confirmed in a fresh process")
    refuted = confirm(first, obs(1.01), STEADY, "CPU", " in a fresh process")
    assert refuted.message.startswith(
        "inconclusive: +20.0% not confirmed in a fresh process, re-measured +1.0% (pass)"
    )
    assert "confirmed" not in confirm(first, obs(1.21), STEADY, "CPU").message


def test_an_improvement_needs_the_same_evidence_as_a_regression() -> None:
    """IMPROVED is re-measured and confirmed like REGRESSION: one process's fast state (or a
    baseline recorded in a slow one) is not the code's improvement."""
    first = judge(obs(0.7), STEADY, 0.05, "CPU")
    assert first.kind is Kind.IMPROVED
    refuted = confirm(first, obs(0.99), STEADY, "CPU", " in a fresh process")
    assert refuted.kind is Kind.INCONCLUSIVE
    assert refuted.message.startswith(
        "inconclusive: -30.0% not confirmed in a fresh process, re-measured -1.0% (pass)"
    )
    held = confirm(first, obs(0.71), STEADY, "CPU", " in a fresh process")
    assert held.kind is Kind.IMPROVED
    assert held.message.endswith("; confirmed in a fresh process")


def test_a_faster_clock_alone_is_no_improvement_in_cycle_space() -> None:
    clocked = series(1.0, 1.0, 1.0, sm_mhz=1755)
    first = judge(obs(0.88, sm_mhz=1980), clocked, 0.05, "GPU")
    assert first.kind is Kind.IMPROVED
    verdict = confirm(first, obs(0.88, sm_mhz=1980), clocked, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert verdict.cycles_ratio == pytest.approx(0.88 * 1980 / 1755)
    faster = judge(obs(0.5, sm_mhz=1755), clocked, 0.05, "GPU")
    assert confirm(faster, obs(0.5, sm_mhz=1760), clocked, "GPU").kind is Kind.IMPROVED


def test_a_clock_dip_alone_is_inconclusive_in_cycle_space() -> None:
    clocked = series(1.0, 1.0, 1.0, sm_mhz=1974)
    first = judge(obs(1.125, sm_mhz=1755), clocked, 0.05, "GPU")
    assert first.kind is Kind.REGRESSION
    verdict = confirm(first, obs(1.125, sm_mhz=1755), clocked, "GPU")
    assert verdict.kind is Kind.INCONCLUSIVE
    assert verdict.cycles_ratio == pytest.approx(1.125 * 1755 / 1974)
    assert verdict.message.startswith(
        "inconclusive: SM clock 1755 MHz vs 1974 at baseline: +0.0% in cycles"
    )


def test_a_slowdown_in_cycles_too_stays_a_regression() -> None:
    clocked = series(1.0, 1.0, 1.0, sm_mhz=1974)
    first = judge(obs(1.3, sm_mhz=1974), clocked, 0.05, "GPU")
    verdict = confirm(first, obs(1.3, sm_mhz=1960), clocked, "GPU")
    assert verdict.kind is Kind.REGRESSION
    assert verdict.cycles_ratio == pytest.approx(1.3 * 1960 / 1974)
    assert "in cycles (SM clock 1960 MHz vs 1974)" in verdict.message


@pytest.mark.parametrize("mhz", [None, 0.0, float("nan")])
def test_missing_or_broken_clock_skips_the_cycle_check(mhz: float | None) -> None:
    clocked = series(1.0, 1.0, 1.0, sm_mhz=1974)
    first = judge(obs(1.3), clocked, 0.05, "GPU")
    assert confirm(first, obs(1.3, sm_mhz=mhz), clocked, "GPU").kind is Kind.REGRESSION


def test_formatting_helpers() -> None:
    assert ci_text((1.1, 1.2)) == "+10.0%…+20.0%"
    assert format_value(2048, "bytes") == "2.0 KiB"
    assert format_value(12.5, "GB/s") == "12.5 GB/s"


def test_budget_failure_line() -> None:
    assert budget_failure(3.0, 5.0, "ms", "x") is None
    assert budget_failure(
        12.3, 5.0, "ms", "device time, 40 samples, cold L2", "test_attention"
    ) == ("perf: test_attention median 12.300 ms > max_ms 5 ms (device time, 40 samples, cold L2)")
    assert budget_failure(2**21, 2**20, "bytes", "requested bytes") == (
        "memory: peak 2.0 MiB > max_peak 1.0 MiB (requested bytes)"
    )


def test_a_contended_cpu_run_fails_only_beyond_twice_the_baseline() -> None:
    cpu = series(1.0, 1.0, 1.0, metric="wall")  # a CPU series: its floor is ±30%
    busy = ("load average 3.7 on 2 CPU cores",)
    doubled = judge(obs(2.0, instability=busy), cpu, 0.05, "CPU")
    assert doubled.kind is Kind.INCONCLUSIVE  # another tenant can do that
    assert "raised to 100.0% by this run's CPU contention" in doubled.message
    tripled = judge(obs(3.0, instability=("waited for a CPU 40% of the time",)), cpu, 0.05, "CPU")
    assert tripled.kind is Kind.REGRESSION
    quiet = judge(obs(2.0), cpu, 0.05, "CPU")
    assert quiet.kind is Kind.REGRESSION  # without contention the series' noise decides
    gpu = judge(obs(2.0, instability=busy), STEADY, 0.05, "GPU")
    assert gpu.kind is Kind.REGRESSION  # device time does not share the CPU's fate


def cpu_series(*medians: float, reference_ms: float | None = 0.17) -> Entry:
    recs = [
        Recording(f"2026-11-{i + 1:02d}", m, 0.02, 50, reference_ms=reference_ms)
        for i, m in enumerate(medians)
    ]
    return entry_of(recs, "ms", ENV, "wall")


def test_a_slow_stretch_of_the_host_is_not_a_regression_a_real_one_in_it_still_is() -> None:
    """An unchanged test read 2.4x while the reference loop read 2.2x (the CPU A/A's slow host
    read up to 2.3x): the ratio's CI reaches back into the band; 6x in the same stretch still
    lies beyond it."""
    entry = cpu_series(1.0, 1.0, 1.0, 1.0, 1.0)
    assert entry.reference_ms == pytest.approx(0.17)
    stretch = judge(obs(2.4, 0.02, reference_ms=0.38), entry, 0.05, "CPU")
    assert stretch.kind is Kind.INCONCLUSIVE
    assert "this measurement was unstable: the machine ran a reference loop 2.2x slower" in (
        stretch.message
    )
    assert "run again when the machine is as fast as when it was recorded" in stretch.message
    # the A/A's serial false failure: json.dumps read 2.10x while the loop read 1.58x
    dumps = judge(obs(2.10, 0.046, reference_ms=0.17 * 1.58), entry, 0.05, "CPU")
    assert dumps.kind is Kind.INCONCLUSIVE
    assert judge(obs(2.4, 0.02), entry, 0.05, "CPU").kind is Kind.REGRESSION  # unseen: red
    real = judge(obs(6.0, 0.02, reference_ms=0.38), entry, 0.05, "CPU")
    assert real.kind is Kind.REGRESSION
    assert real.message.endswith("2.2x slower than when the baseline was recorded (380 / 170 µs), "
                                 "counted in the CI")  # fmt: skip
    # within the loop's jitter nothing changes; an entry recorded without the loop neither
    assert judge(obs(2.4, 0.02, reference_ms=0.19), entry, 0.05, "CPU").kind is Kind.REGRESSION
    older = cpu_series(1.0, 1.0, 1.0, 1.0, 1.0, reference_ms=None)
    assert older.reference_ms is None
    assert judge(obs(2.4, 0.02, reference_ms=0.38), older, 0.05, "CPU").kind is Kind.REGRESSION


def host_series(loops: float, reference_ms: float) -> Entry:
    recs = [
        Recording(f"2026-11-0{i}", loops, 0.01, 50, reference_ms=reference_ms) for i in (1, 2, 3)
    ]
    return entry_of(recs, "loops", ENV, "host")


@pytest.mark.parametrize(
    ("value", "reference_ms", "kind", "judged"),
    [
        # the host ran the reference 1.18x faster, 1 ms of kernels: up to 0.18 loop is theirs
        (3.1, 0.85, Kind.PASS, 3.0),  # moved to the baseline, never past it
        (3.17, 0.85, Kind.PASS, 3.0),
        (3.8, 0.85, Kind.REGRESSION, 3.8 - (1 / 0.85 - 1)),  # beyond what the kernels explain
        # 1.15x slower: the kernels weigh less, up to 0.13 loop fewer
        (2.9, 1.15, Kind.PASS, 3.0),
        (2.4, 1.15, Kind.IMPROVED, 2.4 - (1 / 1.15 - 1)),
    ],
)
def test_the_kernels_of_a_host_bound_call_do_not_follow_the_hosts_speed(
    value: float, reference_ms: float, kind: Kind, judged: float
) -> None:
    base = host_series(3.0, reference_ms=1.0)
    found = judge(
        obs(value, unit="loops", reference_ms=reference_ms, fixed_ms=1.0), base, 0.05, "GPU"
    )
    assert found.kind is kind
    assert found.ratio == pytest.approx(judged / 3.0)
    assert "do not follow the host's speed" in found.message
    if judged == 3.0:
        assert "set aside, judged as 3 loops" in found.message


def test_no_more_of_a_host_bound_calls_kernels_is_set_aside_than_its_recordings_show() -> None:
    """A call whose loops stayed put while its recordings saw the host in two states (0.08 and
    0.15 ms launch references) waits for none of its 100 µs of kernels: +25% read with the host
    1.2x faster than at recording is +25%, not less the up to 0.18 loop the kernels could be."""
    recs = [
        Recording(f"2026-11-0{i}", 3.0, 0.01, 50, reference_ms=ref, fixed_ms=0.1)
        for i, ref in enumerate((0.08, 0.10, 0.10, 0.12, 0.15), start=1)
    ]
    base = entry_of(recs, "loops", ENV, "host")
    assert base.unmoved_ms == (0.0, 0.0)
    measured = obs(3.75, unit="loops", reference_ms=0.085, fixed_ms=0.1)
    found = judge(measured, base, 0.10, "GPU")
    assert found.kind is Kind.REGRESSION
    assert found.ratio == pytest.approx(1.25)
    assert "set aside" not in found.message
    # recordings in one state say nothing of it: all the kernels may be the host's speed
    one_state = entry_of([replace(r, reference_ms=0.10) for r in recs], "loops", ENV, "host")
    assert one_state.unmoved_ms is None
    found = judge(measured, one_state, 0.10, "GPU")
    assert found.ratio == pytest.approx((3.75 - 0.1 * (1 / 0.085 - 1 / 0.10)) / 3.0)
    assert "its kernels (100.00 µs per call) do not follow the host's speed" in found.message


def test_a_host_bound_call_sets_aside_as_much_of_its_kernels_as_its_recordings_show() -> None:
    """Recordings whose loops fell by 0.5 ms / reference: 0.5 of 1 ms of kernels, no more and
    no less, whichever way the host's speed moved since."""
    recs = [
        Recording(f"2026-11-0{i}", 2.0 + 0.5 / ref, 0.01, 50, reference_ms=ref, fixed_ms=1.0)
        for i, ref in enumerate((0.08, 0.10, 0.15), start=1)
    ]
    base = entry_of(recs, "loops", ENV, "host")
    assert base.unmoved_ms == pytest.approx((0.5, 0.5))
    for reference_ms in (0.085, 0.14):
        unchanged = obs(2.0 + 0.5 / reference_ms, unit="loops", reference_ms=reference_ms)
        unchanged = replace(unchanged, fixed_ms=1.0)
        found = judge(unchanged, base, 0.10, "GPU")
        assert found.kind is Kind.PASS
        assert found.ratio == pytest.approx(1.0)
        said = "500.00 µs of its kernels' 1.000 ms per call do not follow the host's speed, as"
        assert said in found.message
    # 25% more host work (2.5 loops for 2.0) read with the host slow (0.14 ms): its kernels
    # count 0.5 / 0.14 loop there, taken as the 0.5 / 0.10 they counted at recording for
    # certain, so the whole of the change is judged, none of it lost to the host's state
    assert base.value == pytest.approx(7.0)
    slower = obs(2.5 + 0.5 / 0.14, unit="loops", reference_ms=0.14, fixed_ms=1.0)
    assert judge(slower, base, 0.10, "GPU").ratio == pytest.approx(7.5 / 7.0)


def test_a_host_bound_call_sets_aside_a_range_of_its_kernels_where_its_recordings_scatter() -> None:
    """Recordings whose loops fall with 1 / reference by about 0.5 ms, give or take: the verdict
    takes off the range's low end for certain and the rest only as far as the baseline, and
    says both ends."""
    refs = (0.08, 0.09, 0.10, 0.12, 0.15)
    noise = (0.08, -0.10, 0.05, 0.06, -0.07)
    recs = [
        Recording(f"2026-11-0{i}", 2.0 + 0.5 / ref + e, 0.01, 50, reference_ms=ref, fixed_ms=1.0)
        for i, (ref, e) in enumerate(zip(refs, noise, strict=True), start=1)
    ]
    base = entry_of(recs, "loops", ENV, "host")
    assert base.unmoved_ms is not None
    low, high = base.unmoved_ms
    assert 0 < low < 0.5 < high < 1.0
    measured = obs(2.0 + 0.5 / 0.085, unit="loops", reference_ms=0.085, fixed_ms=1.0)
    found = judge(measured, base, 0.10, "GPU")
    assert found.kind is Kind.PASS
    least, most = format_ms(low), format_ms(high)
    said = f"{least}–{most} of its kernels' 1.000 ms per call do not follow the host's speed"
    assert said in found.message
    per = 1 / 0.085 - 1 / base.reference_ms
    sure, top = format_pct(low * per / base.value), format_pct(high * per / base.value)
    assert f"{sure}…{top} set aside" in found.message


def test_a_range_of_the_kernels_from_none_is_said_up_to_its_high_end() -> None:
    """``topk`` then ``nonzero`` on the H100 (2026-11-26): its recordings show none to about
    64 µs of its 128 µs of kernels unmoved by the host; the message says "up to", not "0.0 ns–"."""
    points = [(2.617, 0.0782), (2.464, 0.1318), (2.395, 0.0930), (2.384, 0.1210), (2.457, 0.1231)]
    recs = [
        Recording(f"2026-11-2{i}", loops, 0.01, 50, reference_ms=ref, fixed_ms=0.128)
        for i, (loops, ref) in enumerate(points, start=1)
    ]
    base = entry_of(recs, "loops", ENV, "host")
    assert base.unmoved_ms is not None
    low, high = base.unmoved_ms
    assert low == 0 < high < 0.128
    measured = obs(2.45, unit="loops", reference_ms=0.080, fixed_ms=0.128)
    message = judge(measured, base, 0.10, "GPU").message
    assert f"up to {format_ms(high)} of its kernels' 128.00 µs per call do not follow" in message
    assert "0.0 ns" not in message


def test_a_host_bound_call_that_waits_for_all_its_kernels_is_judged_at_the_recordings_reference() -> (
    None
):
    """``unique`` of 4 M elements on the H100: 337 µs of kernels the call waits for whole, about
    90 µs of host work (1 loop). 25% more host work read with the host 1.6x slow (146 µs a
    reference against about 90 µs) is 4.5 loops, under the baseline's 4.74: with none to all of
    the kernels allowed it read as no change at all (2026-11-27, 40a1b58); the recordings show
    all of them, so it reads as the +25% it is at the recordings' reference."""
    recs = [
        Recording(f"2026-11-2{i}", 1.0 + 0.337 / ref, 0.01, 50, reference_ms=ref, fixed_ms=0.337)
        for i, ref in enumerate((0.085, 0.088, 0.090, 0.092, 0.130), start=1)
    ]
    base = entry_of(recs, "loops", ENV, "host")
    assert base.unmoved_ms is not None
    assert base.unmoved_ms[0] == pytest.approx(0.337)
    planted = 1.0 + 0.25 * base.value + 0.337 / 0.146
    assert planted < base.value
    measured = obs(planted, unit="loops", reference_ms=0.146, fixed_ms=0.337)
    found = judge(measured, base, 0.1, "GPU")
    assert found.ratio == pytest.approx((planted + 0.337 / 0.090 - 0.337 / 0.146) / base.value)
    assert found.ratio == pytest.approx(1.25)
    assert found.awaits_host  # read in the slow state: measured again once the host is back
    said = "its kernels (337.00 µs per call) do not follow the host's speed, all of them as its"
    assert said in found.message
    assert "-30.3% set aside, judged as 5.93 loops" in found.message
    one_state = entry_of([replace(r, reference_ms=0.09) for r in recs], "loops", ENV, "host")
    assert judge(measured, one_state, 0.1, "GPU").kind is Kind.PASS  # none to all: the old rule


def test_a_host_bound_ratio_is_judged_as_measured_without_the_kernels_time() -> None:
    base = host_series(3.0, reference_ms=1.0)
    found = judge(obs(3.6, unit="loops", reference_ms=0.9), base, 0.05, "GPU")
    assert found.kind is Kind.REGRESSION
    assert found.ratio == pytest.approx(1.2)
    assert "set aside" not in found.message
    assert "launch reference" not in found.message  # within HOST_MIN: not named


def test_a_much_faster_host_widens_a_host_bound_verdict_less_than_a_cpu_one() -> None:
    base = host_series(3.0, reference_ms=1.0)
    # twice as fast: LAUNCH_STRETCH x 1 = ±10% joins this side's noise
    near = judge(obs(3.3, unit="loops", reference_ms=0.5), base, 0.05, "GPU")
    assert near.kind is Kind.INCONCLUSIVE
    assert "the machine ran the launch reference 2.0x faster" in near.message
    far = judge(obs(9.0, unit="loops", reference_ms=0.5), base, 0.05, "GPU")
    assert far.kind is Kind.REGRESSION
    # a CPU time whose reference loop ran twice as fast: HOST_STRETCH x 1 = ±150% of noise
    cpu_base = entry_of(
        [Recording(f"2026-11-0{i}", 3.0, 0.01, 50, reference_ms=1.0) for i in (1, 2, 3)],
        "ms",
        ENV,
        "wall",
    )
    cpu = judge(obs(9.0, reference_ms=0.5), cpu_base, 0.05, "CPU")
    assert cpu.kind is Kind.INCONCLUSIVE  # the same +200% that fails host-bound time
    assert "the machine ran a reference loop 2.0x faster" in cpu.message


@pytest.mark.parametrize(
    ("value", "reference_ms", "kind", "other_state"),
    [
        # the launch reference 1.6x slower than at recording: a slowdown in loops that the
        # state could make (up to 1.6 ** 0.5 = 1.26x beyond the band) is not judged
        (3.9, 1.6, Kind.INCONCLUSIVE, True),
        (4.5, 1.6, Kind.REGRESSION, False),  # +50%: beyond what the state explains
        (30.0, 1.6, Kind.REGRESSION, False),
        (3.0, 1.6, Kind.PASS, False),  # no change needs no state
        (1.5, 1.6, Kind.IMPROVED, False),  # faster in a slower state: still a speed-up
        # 1.6x faster: a speed-up the state could make is not judged, a slowdown is
        (2.5, 1 / 1.6, Kind.INCONCLUSIVE, True),
        (2.0, 1 / 1.6, Kind.IMPROVED, False),
        (9.0, 1 / 1.6, Kind.REGRESSION, False),
        # within HOST_MIN (1.2x): the same state, judged
        (3.9, 1.2, Kind.REGRESSION, False),
    ],
)
def test_a_host_bound_change_is_judged_only_in_the_recordings_state(
    value: float, reference_ms: float, kind: Kind, other_state: bool
) -> None:
    """The host's slow state slowed a Python-heavy call 1.5x more than the launch reference:
    such a call read +46% in loops, unchanged."""
    base = host_series(3.0, reference_ms=1.0)
    seen = obs(value, unit="loops", reference_ms=reference_ms)
    found = judge(seen, base, 0.05, "GPU")
    assert (found.kind, found.other_state) == (kind, other_state)
    beyond = reference_ms > 1.5 or reference_ms < 0.7
    assert host_state(seen, base) == (pytest.approx(reference_ms) if beyond else None)
    assert found.host_state == host_state(seen, base)  # the verdict keeps what it found
    # a held-back slowdown waits for the host's state; a held-back speed-up does not
    assert found.awaits_host is (other_state and value > 3)
    if other_state:
        change, speed = ("slowdown", "fast") if value > 3 else ("speed-up", "slow")
        assert found.message.endswith(
            f"a host-bound {change} is judged only with the host as {speed} as at recording "
            f"(Python-heavy code {'slows' if value > 3 else 'speeds up'} more than the launch "
            "reference): measured again when it is"
        )
        assert "the machine ran the launch reference 1.6x" in found.message
    # a CPU time (a reference loop of its own) and a side without a reference are not gated
    assert host_state(obs(value, reference_ms=reference_ms), base) is None
    assert host_state(obs(value, unit="loops"), base) is None


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        (Observation(3.9, 0.01, unit="loops", reference_ms=1.2), True),  # within HOST_MIN
        (Observation(3.0, 0.01, unit="loops", reference_ms=1.6), False),  # the other state
        (Observation(3.0, 0.01, unit="loops"), False),  # no reference of its own
        (Observation(3.0, 0.01, unit="loops", reference_ms=math.nan), False),
        (Observation(3.0, 0.01, unit="ms", reference_ms=1.0), False),  # a CPU time's loop
    ],
)
def test_a_host_bound_time_read_as_at_recording(observed: Observation, expected: bool) -> None:
    """Whether a measurement met the host in its recordings' state (it ends a spell of the
    other state); never without a series to compare with."""
    assert as_recorded(observed, host_series(3.0, reference_ms=1.0)) is expected
    assert not as_recorded(observed, None)


@pytest.mark.parametrize(
    ("slow_loops", "kind"),
    [
        (3.0, Kind.REGRESSION),  # recorded in both states, its loops flat: reach 0.2
        (3.0 * 1.6**0.4, Kind.INCONCLUSIVE),  # its loops rise with the reference: reach 0.5
    ],
)
def test_a_series_seen_in_both_host_states_holds_back_only_what_its_state_can_make(
    slow_loops: float, kind: Kind
) -> None:
    """+30% in loops with the reference 1.6x slower: beyond 1.6 ** 0.2 of the band for a
    series whose loops did not follow the host's state, within 1.6 ** 0.5 for one whose did."""
    recordings = [
        Recording(f"2026-11-0{i}", loops, 0.01, 50, reference_ms=ref)
        for i, (loops, ref) in enumerate([(3.0, 1.0), (3.0, 1.0), (slow_loops, 1.6), (3.0, 1.0)])
    ]
    base = entry_of(recordings, "loops", ENV, "host")
    found = judge(obs(3.9, unit="loops", reference_ms=1.6), base, 0.05, "GPU")
    assert (found.kind, found.other_state) == (kind, kind is Kind.INCONCLUSIVE)


def test_a_confirmation_in_another_host_state_says_so() -> None:
    base = host_series(3.0, reference_ms=1.0)
    first = judge(obs(3.9, unit="loops", reference_ms=1.0), base, 0.05, "GPU")
    assert first.kind is Kind.REGRESSION
    again = confirm(first, obs(3.9, unit="loops", reference_ms=1.6), base, "GPU")
    assert (again.kind, again.other_state) == (Kind.INCONCLUSIVE, True)
    assert again.host_state == pytest.approx(1.6)  # the re-measurement's, kept
    assert again.awaits_host
    assert "not confirmed" in again.message
    same = confirm(first, obs(3.9, unit="loops", reference_ms=1.1), base, "GPU")
    assert (same.kind, same.other_state) == (Kind.REGRESSION, False)


@pytest.mark.parametrize(
    ("value", "kind", "awaits"),
    [
        (3.1, Kind.PASS, False),
        (3.3, Kind.INCONCLUSIVE, True),  # +10% with the host 1.6x faster: undecided, it waits
        (3.5, Kind.REGRESSION, False),  # decided
        (2.5, Kind.INCONCLUSIVE, False),  # a speed-up held back: it fails nothing, no wait
    ],
)
def test_a_slowdown_left_undecided_in_another_host_state_awaits_the_host(
    value: float, kind: Kind, awaits: bool
) -> None:
    base = host_series(3.0, reference_ms=1.0)
    found = judge(obs(value, unit="loops", reference_ms=1 / 1.6), base, 0.05, "GPU")
    assert (found.kind, found.awaits_host) == (kind, awaits)
    # the same reading with the host as at recording is decided as it reads: nothing to await
    assert not judge(obs(value, unit="loops", reference_ms=1.0), base, 0.05, "GPU").awaits_host


def launch_series(
    launches: float, metric: str = "device", launch_gap_us: float | None = None
) -> Entry:
    """Device time of 217 µs per call (kornia's RandomAffine), recorded with a breakdown of
    ``launches`` kernels per call (and, given, the recordings' launch gap)."""
    from pytest_cudaperf.breakdown.model import Breakdown, Kernel

    breakdown = Breakdown(
        backend="cuda",
        calls=5,
        total_us=130.6,
        host_us=2000.0,
        entries=(Kernel("k", "elementwise_kernel", launches, 130.6),),
    )
    entry = series(0.2171, 0.2171, 0.2171, metric=metric)
    if launch_gap_us is not None:
        probed = tuple(replace(r, launch_gap_us=launch_gap_us) for r in entry.recordings)
        entry = replace(entry, recordings=probed)
    return replace(entry, breakdown=breakdown.to_json())


def test_device_time_of_many_launches_carries_their_gaps_noise() -> None:
    """A process whose GPU spends 0.15 µs more between launches: +6.4% on 96 launches, kernels
    unchanged. Judged as the gaps' noise, not as a regression."""
    slow_gaps = obs(0.2171 * 1.064, halfwidth=0.007)
    found = judge(slow_gaps, launch_series(96), 0.05, "GPU")
    assert found.kind is Kind.INCONCLUSIVE
    assert "96 kernel launches per call: the GPU's gaps between them move" in found.message
    # the same call at +20% is a regression still
    assert judge(obs(0.2171 * 1.20, halfwidth=0.007), launch_series(96), 0.05, "GPU").kind is (
        Kind.REGRESSION
    )
    # two launches a call, or the kernels' own series: no such noise
    assert judge(slow_gaps, launch_series(2), 0.05, "GPU").kind is Kind.REGRESSION
    kernels = judge(slow_gaps, launch_series(96, metric="kernels"), 0.05, "GPU")
    assert kernels.kind is Kind.REGRESSION


def test_a_launch_gap_probed_on_both_sides_is_set_aside() -> None:
    """The process's GPU took 0.20 µs more per launch than at recording (2.12 vs 1.92 µs): on 96
    launches 19.2 µs of the +8.8% are set aside and the rest judged; what the probe leaves
    unexplained is the noise."""
    recorded = launch_series(96, launch_gap_us=1.92)
    slow_gaps = obs(0.2171 + 0.0192 + 0.0005, halfwidth=0.007, launch_gap_us=2.12)
    found = judge(slow_gaps, recorded, 0.05, "GPU")
    assert found.kind is Kind.PASS
    assert found.ratio == pytest.approx((0.2171 + 0.0005) / 0.2171)
    assert "the GPU took 2.120 µs per launch between queued kernels in this process, 1.920" in (
        found.message
    )
    assert found.ci is not None  # the residual, 0.05 µs a launch over 236.8 µs, is its noise
    residual = 96 * instability.LAUNCH_GAP_RESIDUAL_US / 236.8
    assert (found.ci[1] - found.ci[0]) / 2 == pytest.approx(residual, rel=0.05)
    # a kernel 10% slower is caught through it
    slower = obs(0.2171 * 1.10 + 0.0192, halfwidth=0.007, launch_gap_us=2.12)
    assert judge(slower, recorded, 0.05, "GPU").kind is Kind.REGRESSION
    # set aside toward the baseline only: faster gaps never make an unchanged call slower
    fast_gaps = obs(0.2171 - 0.0050, halfwidth=0.007, launch_gap_us=1.82)  # 9.6 µs faster
    assert judge(fast_gaps, recorded, 0.05, "GPU").ratio == pytest.approx(1.0)
    # without a probe on this side: the whole move is noise, as before
    unprobed = judge(obs(0.2171 * 1.064, halfwidth=0.007), recorded, 0.05, "GPU")
    assert unprobed.kind is Kind.INCONCLUSIVE
    assert "set aside" not in unprobed.message


def test_only_a_verdict_that_the_series_noise_alone_holds_is_series_bound() -> None:
    """Between the tolerance and the series' own band, with this run's host as at recording:
    the series holds it (a more precise measurement of that median stays there). Raised by this
    run's contention, moved by the host's speed, or a CI straddling the band: not the series."""
    noisy = series(1.0, 1.13, 0.87)  # ±19.5% between processes
    held = judge(obs(1.15), noisy, 0.05, "GPU")
    assert held.kind is Kind.INCONCLUSIVE
    assert held.series_bound
    straddling = judge(obs(1.07, halfwidth=0.04), STEADY, 0.05, "GPU")
    assert straddling.kind is Kind.INCONCLUSIVE
    assert not straddling.series_bound
    busy = ("load average 3.7 on 2 CPU cores",)
    contended = judge(obs(1.5, instability=busy), series(1.0, 1.0, 1.0, metric="wall"), 0.05, "C")
    assert contended.kind is Kind.INCONCLUSIVE
    assert not contended.series_bound
    wide = cpu_series(1.0, 1.35, 0.75, 1.0, 1.0)  # a CPU series moving ±30% or more
    assert judge(obs(1.2, 0.02, reference_ms=0.17), wide, 0.05, "CPU").series_bound
    slow_host = judge(obs(1.2, 0.02, reference_ms=0.17 * 1.6), wide, 0.05, "CPU")
    assert slow_host.kind is Kind.INCONCLUSIVE
    assert not slow_host.series_bound  # the host may come back: measured again
    assert not judge(obs(1.03), noisy, 0.05, "GPU").series_bound  # a pass


@pytest.mark.parametrize(("kind", "ratio", "ci", "only"), [
    (Kind.INCONCLUSIVE, 0.8, (0.7, 0.9), True),  # a speed-up, a regression ruled out
    (Kind.INCONCLUSIVE, 0.8, (0.7, 1.2), True),  # its high end at the threshold
    (Kind.INCONCLUSIVE, 0.8, (0.5, 1.3), False),  # its CI reaches past the threshold
    (Kind.INCONCLUSIVE, 1.1, (0.95, 1.25), False),  # read as a slowdown
    (Kind.IMPROVED, 0.7, (0.65, 0.75), False),  # decided
])  # fmt: skip
def test_speed_up_only_is_an_inconclusive_speed_up_that_cannot_be_a_regression(
    kind: Kind, ratio: float, ci: tuple[float, float], only: bool
) -> None:
    assert Verdict(kind, ratio, ci, 0.2).speed_up_only is only
    assert not Verdict(Kind.INCONCLUSIVE, ratio).speed_up_only  # no CI: nothing to rule out
