from __future__ import annotations

import pytest

from pytest_cudaperf.markers import (
    GpuRequirement,
    LeakOptions,
    MarkerError,
    Marks,
    PerfOptions,
    marker_help,
    parse,
    parse_marks,
)


def test_gpu_defaults_and_parsing() -> None:
    assert parse("gpu", (), {}) == GpuRequirement()
    req = parse("gpu", (2,), {"min_memory": "40GB", "capability": "9.0"})
    assert req == GpuRequirement(count=2, min_memory=40 * 10**9, capability=(9, 0))


def test_perf_parsing() -> None:
    opts = parse("perf", (), {"max_ms": 5, "tolerance": "2%", "cache": "hot", "graph": True})
    assert opts == PerfOptions(max_ms=5.0, tolerance=0.02, cache="hot", graph=True)
    assert parse("perf", (), {"rounds": 1}).rounds == 1
    assert parse("perf", (), {"max_recompiles": 0}).max_recompiles == 0
    assert parse("perf", (), {}).max_recompiles is None


def test_perf_takes_the_work_the_speed_of_light_and_the_energy_limit() -> None:
    found = parse("perf", (), {"flops": 2e9, "bytes": "256MB", "min_peak": "50%", "max_joules": 2})
    assert (found.flops, found.nbytes, found.min_peak, found.max_joules) == (
        2e9,
        256 * 10**6,
        0.5,
        2.0,
    )
    assert found.wants_roofline
    assert not parse("perf", (), {"max_joules": 2}).wants_roofline


def test_no_leak_parsing() -> None:
    assert parse("no_leak", (), {}) == LeakOptions()
    assert parse("no_leak", (), {"tolerance": "1 MiB"}).tolerance == 2**20


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "message"),
    [
        ("perf", (), {"max_ms": -1}, "@pytest.mark.perf: max_ms: expected a positive number"),
        ("perf", (), {"max_ms": "5"}, "max_ms: expected a positive number, got '5'"),
        ("perf", (), {"maxms": 5}, "@pytest.mark.perf: unknown argument 'maxms' (did you mean"),
        ("perf", (), {"cache": "warm"}, "cache: expected 'cold' or 'hot'"),
        ("perf", (), {"rounds": 0}, "rounds: expected an integer from 1 to 100, got 0"),
        # a typo that would run for hours: each round takes a few calls whatever its share
        ("perf", (), {"rounds": 10**6}, "rounds: expected an integer from 1 to 100, got 1000000"),
        (
            "perf",
            (),
            {"min_time": 1, "max_time": 0.01},
            "@pytest.mark.perf: min_time: 1 s is more than max_time (0.01 s), the budget that "
            "ends the measurement",
        ),
        ("perf", (), {"max_recompiles": -1}, "max_recompiles: expected an integer >= 0, got -1"),
        ("perf", (), {"min_peak": "150%"}, "min_peak: expected a fraction in (0, 1]"),
        ("perf", (), {"min_peak": "fast"}, "min_peak: "),
        ("perf", (), {"max_joules": 0}, "max_joules: expected a positive number, got 0"),
        ("perf", (), {"flops": "many"}, "flops: expected a positive number, got 'many'"),
        ("perf", (), {"bytes": "lots"}, "bytes: "),
        ("perf", (), {"max_recompiles": True}, "max_recompiles: expected an integer >= 0"),
        ("gpu", (0,), {}, "@pytest.mark.gpu: count: expected an integer >= 1, got 0"),
        ("gpu", (), {"min_memory": "lots"}, "min_memory: expected a size"),
        ("gpu", (), {"capability": "ampere"}, "capability: expected a compute capability"),
        ("no_leak", (), {"iterations": 1}, "iterations: expected an integer >= 2, got 1"),
        ("no_leak", (), {"pinned": "yes"}, "pinned: expected True or False"),
        ("no_leak", (1, 2, 3, 4, 5, 6, 7), {}, "too many positional arguments"),
        ("perf", (1,) * 16, {}, "too many positional arguments"),
    ],
)
def test_bad_arguments_name_the_argument(
    name: str, args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(MarkerError) as excinfo:
        parse(name, args, kwargs)
    assert message in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_marker_help_has_full_signature() -> None:
    assert marker_help("gpu").startswith("gpu(count=1, min_memory=None, capability=None): ")
    assert marker_help("perf").startswith(
        "perf(max_ms=None, tolerance=None, cache=None, graph=False, warmup=None, "
        "min_time=None, max_time=None, min_speedup=None, max_peak=None, rounds=None, "
        "max_recompiles=None, flops=None, bytes=None, min_peak=None, max_joules=None): "
    )
    assert marker_help("no_leak").startswith(
        "no_leak(tolerance=0, warmup=2, iterations=3, pinned=True, outside_torch=False, "
        "max_peak=None): "
    )


@pytest.mark.parametrize("given", [5, 2, "5"])
def test_perf_tolerance_must_be_a_fraction_or_a_percentage(given: object) -> None:
    with pytest.raises(MarkerError, match=r"^@pytest.mark.perf: tolerance: a bare number") as info:
        parse("perf", (), {"tolerance": given})
    assert str(info.value).endswith(f"did you mean '{given}%'?")
    assert parse("perf", (), {"tolerance": f"{given}%"}).tolerance == pytest.approx(
        int(given) / 100  # type: ignore[call-overload]
    )


class _Mark:
    def __init__(self, name: str, *args: object, **kwargs: object) -> None:
        self.name, self.args, self.kwargs = name, args, kwargs


def test_a_tests_marks_parse_closest_first_into_typed_options() -> None:
    """The closest mark of each name wins (a test's own over its class's); other plugins'
    marks are not ours; a bad argument becomes the test's error, the other marks still parse."""
    marks = parse_marks(
        [
            _Mark("perf", tolerance="2%"),
            _Mark("skipif"),
            _Mark("perf", tolerance="9%"),
            _Mark("gpu"),
        ]
    )
    assert marks == Marks(gpu=GpuRequirement(), perf=PerfOptions(tolerance=0.02))
    assert marks
    assert not parse_marks([_Mark("parametrize", "x", [1])])
    bad = parse_marks([_Mark("no_leak", tolerance="lots"), _Mark("perf")])
    assert bad.perf == PerfOptions()
    assert bad.no_leak is None
    assert bad.error is not None
    assert bad.error.startswith("@pytest.mark.no_leak: tolerance")


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (
            "perf",
            {"max_msec": 5},
            "@pytest.mark.perf: unknown argument 'max_msec' (did you mean 'max_ms'?); it takes "
            "max_ms, tolerance, cache, graph, warmup, min_time, max_time, min_speedup, max_peak, "
            "rounds, max_recompiles, flops, bytes, min_peak, max_joules",
        ),
        (
            "gpu",
            {"memory": "40GB"},
            "@pytest.mark.gpu: unknown argument 'memory' (did you mean 'min_memory'?); it takes "
            "count, min_memory, capability",
        ),
        (
            "no_leak",
            {"tolerence": 0},
            "@pytest.mark.no_leak: unknown argument 'tolerence' (did you mean 'tolerance'?); it "
            "takes tolerance, warmup, iterations, pinned, outside_torch, max_peak",
        ),
        (
            "distributed",
            {"ranks": 2},
            "@pytest.mark.distributed: unknown argument 'ranks'; it takes world_size, backend, "
            "timeout",
        ),
    ],
)
def test_an_unknown_argument_gets_a_did_you_mean_and_the_valid_ones(
    name: str, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(MarkerError) as excinfo:
        parse(name, (), kwargs)
    assert str(excinfo.value) == message


def test_too_many_positional_arguments_list_the_valid_ones() -> None:
    with pytest.raises(MarkerError) as excinfo:
        parse("distributed", (2, "gloo", 60, 1), {})
    assert str(excinfo.value) == (
        "@pytest.mark.distributed: too many positional arguments; it takes world_size, backend, "
        "timeout"
    )
