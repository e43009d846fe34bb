"""Energy per call from a fake NVML counter: its resolution probed, windows aligned on its
updates, extended to resolve it, and no figure (the reason instead) where they cannot."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_cudaperf.measure import energy
from pytest_cudaperf.measure.energy import (
    Calls,
    Clock,
    Energy,
    Resolution,
    energy_of,
    measure_energy,
)


@dataclass
class FakeGpu:
    """A GPU drawing ``idle_w`` (``busy_w`` while a call runs), whose energy counter NVML
    updates every ``period_s`` in whole millijoules; time moves only when something waits."""

    period_s: float = 0.01
    idle_w: float = 60.0
    busy_w: float = 500.0
    call_s: float = 0.001
    now_s: float = 0.0
    joules: float = 0.0
    #: the energy as of the counter's last update
    updated: float = 0.0
    stuck: bool = False

    def _advance(self, seconds: float, watts: float) -> None:
        end = self.now_s + seconds
        while True:
            tick = (int(self.now_s / self.period_s + 1e-9) + 1) * self.period_s
            if tick > end:
                break
            self.joules += (tick - self.now_s) * watts
            self.now_s, self.updated = tick, self.joules
        self.joules += (end - self.now_s) * watts
        self.now_s = end

    def sleep(self, seconds: float) -> None:
        self._advance(seconds, self.idle_w)

    def call(self) -> None:
        self._advance(self.call_s, self.busy_w)

    def millijoules(self) -> int:
        return 1234 if self.stuck else int(self.updated * 1e3)

    def clock(self) -> Clock:
        return Clock(now=lambda: self.now_s, sleep=self.sleep)


def test_the_counters_resolution_is_its_update_period_and_step() -> None:
    gpu = FakeGpu(period_s=0.02)
    found = energy.probe_resolution(gpu, gpu.clock())
    assert isinstance(found, Resolution)
    assert found.update_s == pytest.approx(0.02, abs=0.001)
    assert found.step_mj >= 1
    assert "counter updates every 20 ms" in found.describe()


def test_a_counter_that_does_not_move_says_so() -> None:
    gpu = FakeGpu(stuck=True)
    assert energy.probe_resolution(gpu, gpu.clock()) == (
        "the energy counter did not move within 1 s"
    )


def test_joules_per_call_over_an_aligned_window() -> None:
    gpu = FakeGpu(period_s=0.01, busy_w=500.0, call_s=0.001)
    resolution = Resolution(update_s=0.01, step_mj=1)
    found = measure_energy(Calls(gpu.call, lambda: None, gpu.call_s), gpu, resolution, gpu.clock())
    assert isinstance(found, Energy)
    assert found.window_s >= 0.01 / energy.MAX_ERROR  # extended to resolve the counter
    assert found.joules_per_call == pytest.approx(0.5, rel=energy.MAX_ERROR)  # 500 W x 1 ms
    assert found.watts == pytest.approx(500.0, rel=energy.MAX_ERROR)
    assert found.uncertainty <= energy.MAX_ERROR
    assert found.describe().startswith(f"{energy.format_joules(found.joules_per_call)}/call at ")


def test_a_counter_too_coarse_for_the_longest_window_gives_the_reason() -> None:
    gpu = FakeGpu(period_s=0.2)
    resolution = Resolution(update_s=0.2, step_mj=1)
    found = measure_energy(Calls(gpu.call, lambda: None, gpu.call_s), gpu, resolution, gpu.clock())
    assert found == (
        "energy not measured: the counter updates every 200 ms in steps of >= 1 mJ; a window "
        "of 4 s would be needed for ±5%, beyond 3 s"
    )


def test_the_arithmetic_refuses_a_window_too_short_or_too_few_steps() -> None:
    resolution = Resolution(update_s=0.01, step_mj=1)
    short = energy_of(5000, 0.1, 10, resolution)
    assert short == (
        "energy not measured: a 100 ms window is too short for the counter updates every "
        "10 ms in steps of >= 1 mJ (needs >= 200 ms)"
    )
    assert energy_of(15, 1.0, 10, resolution) == (
        "energy not measured: 15 mJ over the window is under 20 steps of the counter (1 mJ)"
    )
    found = energy_of(200_000, 1.0, 1000, resolution)
    assert isinstance(found, Energy)
    assert (found.joules_per_call, found.watts) == (0.2, 200.0)


def test_energy_round_trips_through_its_dict() -> None:
    found = Energy(0.25, 410.0, 4000, 1.0, Resolution(0.005, 1))
    assert Energy.from_dict(found.to_dict()) == found


def test_joules_read_with_their_prefix() -> None:
    assert energy.format_joules(1.234) == "1.23 J"
    assert energy.format_joules(0.0412) == "41.2 mJ"
    assert energy.format_joules(3.51e-5) == "35.1 µJ"
