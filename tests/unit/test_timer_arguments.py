from __future__ import annotations

import pytest

from pytest_cudaperf.fixtures.arguments import ArgumentError, describe
from pytest_cudaperf.fixtures.timer import check_arguments


def test_a_callable_is_required() -> None:
    with pytest.raises(TypeError) as info:
        check_arguments(42)
    assert str(info.value) == (
        "cuda_timer: expected a callable, got int 42 — pass the function and its arguments: "
        "cuda_timer(fn, x)"
    )


def test_a_tensor_given_for_the_function_is_described_not_dumped() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(256, 256)
    with pytest.raises(ArgumentError) as info:
        check_arguments(x @ x)
    assert str(info.value) == (
        "cuda_timer: expected a callable, got a Tensor of shape (256, 256) — pass the function "
        "and its arguments: cuda_timer(fn, x)"
    )
    assert not info.value.pytrace  # the test fails with the line alone, no traceback


def test_a_long_value_is_shortened() -> None:
    with pytest.raises(ArgumentError) as info:
        check_arguments("x" * 500)
    assert len(str(info.value)) < 150
    assert describe(list(range(1000))).startswith("list [0, 1, 2")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"cache": "warm"},
            ValueError,
            "cuda_timer: cache must be 'cold' or 'hot', got str 'warm'",
        ),
        ({"graph": "yes"}, TypeError, "cuda_timer: graph must be True or False, got str 'yes'"),
        (
            {"times": {"max_time": "1s"}},
            TypeError,
            "cuda_timer: max_time must be seconds, got str '1s'",
        ),
        (
            {"times": {"warmup": -1}},
            ValueError,
            "cuda_timer: warmup must be finite seconds >= 0, got -1",
        ),
        ({"times": {"min_time": float("nan")}}, ValueError, "cuda_timer: min_time must be finite"),
        (
            {"times": {"max_time": True}},
            TypeError,
            "cuda_timer: max_time must be seconds, got bool",
        ),
        (
            {"times": {"min_time": 2, "max_time": 0.05}},
            ValueError,
            "cuda_timer: min_time 2 s is more than max_time (0.05 s), the budget that ends the "
            "measurement",
        ),
        ({"name": 5}, TypeError, "cuda_timer: name must be a non-empty string on one line, got"),
        ({"name": ""}, ValueError, "cuda_timer: name must be a non-empty string on one line, got"),
        ({"name": "a\nb"}, ValueError, "cuda_timer: name must be a non-empty string on one line"),
    ],
)
def test_bad_options_are_one_line_errors(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        check_arguments(len, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ArgumentError)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_good_arguments_pass() -> None:
    check_arguments(len, "hot", True, {"warmup": 0, "min_time": 0.1, "max_time": None})


def test_declared_work_is_read_and_checked_in_one_line() -> None:
    from pytest_cudaperf.fixtures.timer import check_work
    from pytest_cudaperf.run.speed_of_light import Declared

    assert check_work(2e9, "1MB") == Declared(2e9, 10**6)
    assert check_work(None, 4096) == Declared(None, 4096)
    cases = [
        ((True, None), TypeError, "cuda_timer: flops must be a number, got bool True"),
        ((-1, None), ValueError, "cuda_timer: flops must be a finite number > 0, got -1"),
        (("x", None), ValueError, "cuda_timer: flops: expected a number, got 'x'"),
        ((None, [1]), TypeError, "cuda_timer: bytes must be a number, got list [1]"),
        ((None, 0), ValueError, "cuda_timer: bytes must be a finite number > 0, got 0"),
    ]
    for args, error, message in cases:
        with pytest.raises(error) as info:
            check_work(*args)
        assert str(info.value) == message
