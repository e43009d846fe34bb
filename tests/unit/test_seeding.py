from __future__ import annotations

import torch

from pytest_cudaperf.seeding import same_draws


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
