"""After a callable's time is judged: its speed of light (the work it dispatched against the
device's ceilings, gated by ``min_peak``) and its energy per call (an ``energy:call`` series,
judged as a time is, limited by ``max_joules``).

:func:`after_measurement` is the one call from the measurement path. Nothing runs unless asked:
the work is counted with ``--cudaperf-roofline`` or a marker's ``min_peak``/``flops``/``bytes``
(or ``cuda_timer``'s ``flops=``/``bytes=``), energy is measured on CUDA with
``--cudaperf-energy`` or a marker's ``max_joules``. Both run after the samples: counting never
changes what was timed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.observation import Observation
from pytest_cudaperf.report.model import FailureKind, JudgedRecord, OtherDevice
from pytest_cudaperf.run.context import TestContext
from pytest_cudaperf.run.judging import record_env
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.verdict import Kind, judge

if TYPE_CHECKING:
    from pytest_cudaperf.measure.energy import Energy
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.measure.roofline import Roofline
    from pytest_cudaperf.measure.work import Work

ENERGY_SERIES = "energy:call"


@dataclass(frozen=True)
class Declared:
    """The work per call a test declared (``cuda_timer(fn, flops=..., bytes=...)``; the
    marker's where the call gives none)."""

    flops: float | None = None
    nbytes: int | None = None


@dataclass(frozen=True)
class Measured:
    """What was measured, for the speed of light and the energy: the callable, where it ran
    (device, its class, the UUID NVML knows it by) and the lock to run it under."""

    call: Callable[[], object]
    device: Any
    device_class: str
    uuid: str = ""
    lock: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext


def after_measurement(
    test: TestContext, key: SeriesKey, measured: Measured, m: Measurement, declared: Declared
) -> None:
    """The speed of light of ``key``'s time and its energy per call, where asked for (not when
    measurement is disabled, under a tracer, or in a rank)."""
    if test.settings.disable or m.traced or test.run.rank is not None:
        return
    perf = test.perf
    flops = declared.flops if declared.flops is not None else (perf.flops if perf else None)
    nbytes = declared.nbytes if declared.nbytes is not None else (perf.nbytes if perf else None)
    asked = test.settings.roofline or (perf is not None and perf.wants_roofline)
    if asked or flops is not None or nbytes is not None:
        roofline = _roofline(test, measured, m, Declared(flops, nbytes))
        if isinstance(roofline, str):
            test.state.details.append(f"{key.label()}{roofline}")
        else:
            _attach(test, key, m, roofline)
    is_cuda = str(measured.device).startswith("cuda")
    if is_cuda and (test.settings.energy or (perf is not None and perf.max_joules is not None)):
        _energy(test, key, measured, m)


def counted_work(call: Callable[[], object], declared: Declared) -> Work:
    """The call's work: counted, the declared figures winning; not counted at all where both
    are declared (the call is not run again)."""
    from pytest_cudaperf.measure.work import Work, count_work

    if declared.flops is not None and declared.nbytes is not None:
        return Work().with_declared(declared.flops, declared.nbytes)
    return count_work(call).with_declared(declared.flops, declared.nbytes)


def _roofline(
    test: TestContext, measured: Measured, m: Measurement, declared: Declared
) -> Roofline | str:
    """The measurement's roofline, or why there is none (the call failed under the counting
    mode: it ran as measured, so the mode is the cause, and the test is not failed for it)."""
    from pytest_cudaperf.measure.ceilings import datasheet
    from pytest_cudaperf.measure.roofline import Roofline

    try:
        work = counted_work(measured.call, declared)
    # whatever the call raises under the dispatch mode: the reason, not the test's failure
    except Exception as exc:  # noqa: BLE001
        return (
            f"speed of light not counted: the call failed under torch's dispatch mode "
            f"({type(exc).__name__}: {exc}); declare flops= and bytes= to skip counting"
        )
    if not str(measured.device).startswith("cuda"):  # the CPU: rates, no ceiling
        return Roofline(work, m.median_ms, None, None)
    with measured.lock():
        peaks = test.run.ceilings.peaks(measured.device_class, measured.device, work.compute_class)
    return Roofline(work, m.median_ms, peaks, datasheet(measured.device_class))


def _attach(test: TestContext, key: SeriesKey, m: Measurement, roofline: Roofline) -> None:
    """The roofline onto the judged time of ``key`` and its line; a ``min_peak`` miss fails
    the test."""
    state, label = test.state, key.label()
    series = f"time:{m.mode}"
    for i in range(len(state.records) - 1, -1, -1):
        record = state.records[i]
        if record.key == key and record.series == series:
            state.records[i] = dataclasses.replace(record, roofline=roofline)
            break
    state.details.append(f"{label}speed of light: {roofline.describe()}")
    if not (roofline.work.flops or roofline.work.bytes):
        state.details.append(
            f"{label}nothing counted: the call dispatched no torch op that reads, writes or "
            "computes (a Triton or custom kernel?); declare flops= and bytes="
        )
    perf = test.perf
    if perf is None or perf.min_peak is None:
        return
    if roofline.measured is None or roofline.fraction("measured") is None:
        where = f"on {m.device}" if roofline.measured is None else "for its bound"
        state.details.append(f"{label}min_peak not checked: no measured ceiling {where}")
        return
    missed = roofline.gate(perf.min_peak)
    if missed:
        state.fail(FailureKind.BUDGET, f"{label}{missed}")


def _energy(test: TestContext, key: SeriesKey, measured: Measured, m: Measurement) -> None:
    record_energy(test, key, _energy_window(test, measured, m), measured.device_class)


def record_energy(
    test: TestContext, key: SeriesKey, found: Energy | str, device_class: str
) -> None:
    """A window's energy: its ``energy:call`` record, its line and the ``max_joules`` check; no
    figure: the reason, and that ``max_joules`` was not checked."""
    from pytest_cudaperf.measure import energy as nvml_energy

    label = key.label()
    perf = test.perf
    limit = perf.max_joules if perf is not None else None
    if isinstance(found, str):
        unchecked = f"; max_joules {limit:g} J not checked" if limit is not None else ""
        test.state.details.append(f"{label}{found}{unchecked}")
        return
    add_energy(test, key, found, device_class)
    test.state.details.append(f"{label}energy: {found.describe()}")
    if limit is not None and found.joules_per_call > limit:
        test.state.fail(
            FailureKind.BUDGET,
            f"{label}energy: {nvml_energy.format_joules(found.joules_per_call)} per call "
            f"> max_joules {limit:g} J ({found.watts:.0f} W over {found.calls} calls)",
        )


def _energy_window(test: TestContext, measured: Measured, m: Measurement) -> Energy | str:
    """One window of back-to-back calls, under the device's lock; the counter's resolution
    probed once per GPU and process."""
    import torch

    from pytest_cudaperf.measure import energy as nvml_energy

    counter = nvml_energy.nvml_counter(measured.uuid)
    if isinstance(counter, str):
        return f"energy not measured: {counter}"
    resolutions = test.run.energy_resolutions
    device = measured.device

    def sync() -> None:
        torch.cuda.synchronize(device)

    with measured.lock():
        try:
            if measured.uuid not in resolutions:
                resolutions[measured.uuid] = nvml_energy.probe_resolution(counter)
            resolution = resolutions[measured.uuid]
            if isinstance(resolution, str):
                return f"energy not measured: {resolution}"
            calls = nvml_energy.Calls(measured.call, sync, m.median_ms / 1e3)
            return nvml_energy.measure_energy(calls, counter, resolution)
        # an NVML error mid-window: the reason, not the test's failure (the call ran as measured)
        except Exception as exc:  # noqa: BLE001
            return f"energy not measured: {type(exc).__name__}: {exc}"


def add_energy(test: TestContext, key: SeriesKey, found: Energy, device_class: str) -> None:
    """Record joules per call as an ``energy:call`` series, judged against its baseline with
    the run's tolerance (the verdict policy of a time); a regression fails the test."""
    env = record_env(test)
    value = found.joules_per_call
    noise = found.uncertainty
    recording = Recording(
        str(env["date"]), value, noise, found.calls, ci=(value * (1 - noise), value * (1 + noise))
    )
    allowed = test.perf.tolerance if test.perf and test.perf.tolerance else test.settings.tolerance
    record = Record(key, ENERGY_SERIES, device_class, "J", recording, env, None, allowed)
    store = test.run.store
    entry = store.lookup(device_class, key, ENERGY_SERIES)
    obs = Observation(value, noise, env=env, unit="J")
    verdict = judge(obs, entry, allowed, device_class)
    others = tuple(
        OtherDevice(c, float(e.value)) for c, e in store.others(device_class, key, ENERGY_SERIES)
    )
    judged = JudgedRecord(record, verdict, others=others, energy=found)
    test.state.records.append(judged)
    if verdict.kind is Kind.REGRESSION and not test.settings.update:
        test.state.fail(FailureKind.REGRESSION, f"{key.label()}energy {verdict.message}")
