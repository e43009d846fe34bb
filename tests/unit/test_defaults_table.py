"""benchmarks/public_suites/defaults_table.py reads the waits for the host's state from the
lines the waits themselves leave in a test's details: each way a wait can end, as
``run.hoststate`` words it."""

from __future__ import annotations

from benchmark_scripts import benchmark_script

from pytest_cudaperf.run.hoststate import CpuWaited, Waited


def test_every_way_a_wait_ends_is_read_from_its_line() -> None:
    table = benchmark_script("public_suites/defaults_table.py")
    details = [
        Waited(True, 1.5, 0.11).describe(0.12),
        Waited(False, 29.6, 0.068).describe(0.116),
        Waited(False, 0.5, 0.068, spell_s=42.0).describe(0.116),
        CpuWaited(True, 2.0).describe(),
        CpuWaited(False, 30.0, "2 other processes").describe(),
        "callable synchronizes inside: timed on the host in reference loops, its kernels apart",
    ]
    assert table.waits(details) == [
        ("back", 1.5),
        ("in vain", 29.6),
        ("looked once", 0.5),
        ("back", 2.0),
        ("in vain", 30.0),
    ]
