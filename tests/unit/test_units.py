from __future__ import annotations

import pytest

from pytest_cudaperf.units import (
    format_ms,
    format_size,
    parse_capability,
    parse_fraction,
    parse_seconds,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.05", 0.05), ("5%", 0.05), (" 12.5 % ", 0.125), (0.1, 0.1), ("0", 0.0)],
)
def test_parse_fraction(text: str | float, expected: float) -> None:
    assert parse_fraction(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["fast", "-1", "nan", "inf", True, "", "1000%", "-5%"])
def test_parse_fraction_rejects(text: object) -> None:
    with pytest.raises(ValueError, match=r"fraction|finite|percentage"):
        parse_fraction(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "suggestion"), [(5, "'5%'"), (2, "'2%'"), ("5", "'5%'"), (1, "'1%'"), ("10", "'10%'")]
)
def test_a_bare_number_of_one_or_more_suggests_a_percentage(text: object, suggestion: str) -> None:
    with pytest.raises(ValueError, match="a bare number is a fraction below 1") as info:
        parse_fraction(text)  # type: ignore[arg-type]
    assert str(info.value).endswith(f"did you mean {suggestion}?")


def test_percentages_above_one_hundred_are_allowed_with_their_sign() -> None:
    assert parse_fraction("150%") == pytest.approx(1.5)
    assert parse_fraction(0.999) == pytest.approx(0.999)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.5", 0.5), ("500ms", 0.5), ("2s", 2.0), ("250 us", 250e-6), (3, 3.0)],
)
def test_parse_seconds(text: str | float, expected: float) -> None:
    assert parse_seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["0", "-1s", "soon", "1h", False])
def test_parse_seconds_rejects(text: object) -> None:
    with pytest.raises(ValueError, match=r"duration|seconds"):
        parse_seconds(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8GB", 8 * 10**9),
        ("512 MiB", 512 * 2**20),
        ("1.5 KiB", 1536),
        (1024, 1024),
        ("4096", 4096),
        ("2g", 2 * 2**30),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "-1", "5 parsecs", True, "1e400"])
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(ValueError, match=r"size|finite"):
        parse_size(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [((8, 0), (8, 0)), ("8.0", (8, 0)), ("sm_90", (9, 0)), ("sm_86", (8, 6)), (9.0, (9, 0))],
)
def test_parse_capability(value: object, expected: tuple[int, int]) -> None:
    assert parse_capability(value) == expected


@pytest.mark.parametrize("value", ["ampere", (8,), (8, "0"), 8, None])
def test_parse_capability_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="compute capability"):
        parse_capability(value)


def test_formatting() -> None:
    assert format_size(512) == "512 B"
    assert format_size(3 * 2**20) == "3.0 MiB"
    assert format_size(-2048) == "-2.0 KiB"
    assert format_ms(0.00321) == "3.21 µs"
    assert format_ms(1.2345) == "1.234 ms"
    assert format_ms(2500) == "2.500 s"
