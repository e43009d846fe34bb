from __future__ import annotations

import pytest
import torch

from pytest_cudaperf.seeding import reseed, same_draws, written


def test_the_draws_inside_are_the_same_and_the_callers_state_comes_back() -> None:
    torch.manual_seed(99)
    with same_draws(None):
        first = torch.rand(3)
    after_first = torch.rand(3)
    torch.manual_seed(99)
    expected_after = torch.rand(3)
    torch.manual_seed(12345)
    with same_draws(None):
        second = torch.rand(3)
    assert torch.equal(first, second)  # whatever the caller's state was
    assert torch.equal(after_first, expected_after)  # the caller's stream went on untouched


def test_python_and_numpy_draws_inside_are_the_same_and_theirs_come_back() -> None:
    import random

    import numpy as np

    random.seed(7)
    np.random.seed(7)
    with same_draws(None):
        first = (random.random(), float(np.random.rand()))
    after = (random.random(), float(np.random.rand()))
    random.seed(7)
    np.random.seed(7)
    assert after == (random.random(), float(np.random.rand()))  # the caller's streams went on
    random.seed(1)
    np.random.seed(1)
    with same_draws(None):
        second = (random.random(), float(np.random.rand()))
    assert first == second


def test_reseed_starts_torch_python_and_numpy_from_the_seed_for_good() -> None:
    import random

    import numpy as np

    def draws() -> tuple[list[float], float, float]:
        return torch.rand(2).tolist(), random.random(), float(np.random.rand())

    reseed(3)
    first = draws()
    draws()  # the streams go on from the seed
    reseed(3)
    assert draws() == first
    reseed(4)
    assert draws() != first


def test_reseed_without_the_accelerator_seeds_the_cpu_and_leaves_cuda_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def poisoned(seed: int) -> None:
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(torch.cuda, "manual_seed_all", poisoned)
    with pytest.raises(RuntimeError, match="device-side assert"):
        reseed(3)
    reseed(3, accelerator=False)
    first = torch.rand(2).tolist()
    reseed(3, accelerator=False)
    assert torch.rand(2).tolist() == first


def test_a_seed_is_written_as_its_number_or_off() -> None:
    assert written(0) == "0"
    assert written(1234) == "1234"
    assert written(None) == "off"
