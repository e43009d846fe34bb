"""--cudaperf-leak-sweep on a real GPU: the look-alikes of test_gpu_memory.py as plain, unmarked
tests (plus a lazily filled module-level cache) are none of them flagged; five planted leaks (a
module-level list keeping a tensor per call, in five different tests) are five failures, each
naming the planted line."""

from __future__ import annotations

import json

import pytest
from test_gpu_memory import MUST_PASS

pytestmark = pytest.mark.gpu

LAZY_CACHE = """
_TABLES = {}

def test_lazily_filled_module_cache():
    if "table" not in _TABLES:
        _TABLES["table"] = torch.randn(1 << 16, device="cuda")
    _TABLES["table"].sum().item()
"""

#: the look-alikes as a user's suite has them: no marker at all
UNMARKED = MUST_PASS.replace("@pytest.mark.no_leak\n", "") + LAZY_CACHE

PLANTED = """
import torch

KEPT = []

def test_matmul():
    a = torch.randn(256, 256, device="cuda")
    b = a @ a
    KEPT.append(b[0].clone())  # planted
    assert b.shape == (256, 256)

def test_backward():
    w = torch.randn(128, 128, device="cuda", requires_grad=True)
    (w @ w).sum().backward()
    KEPT.append(w.grad.sum(0))  # planted

def test_fft():
    spectrum = torch.fft.rfft(torch.randn(4096, device="cuda"))
    KEPT.append(spectrum.abs()[:128])  # planted

def test_conv():
    conv = torch.nn.Conv2d(4, 4, 3).cuda()
    out = conv(torch.randn(2, 4, 16, 16, device="cuda"))
    KEPT.append(out.mean(0))  # planted

def test_small_tensor():
    x = torch.arange(64, device="cuda")
    KEPT.append(x * 2)  # planted
"""


def _planted_lines() -> dict[str, int]:
    """test name -> the line of its planted append (1-based, as the file is written)."""
    found, current = {}, ""
    for number, line in enumerate(PLANTED.strip("\n").splitlines(), 1):
        if line.startswith("def test_"):
            current = line[4 : line.index("(")]
        if "# planted" in line:
            found[current] = number
    return found


def test_look_alikes_unmarked_are_not_flagged(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unmarked=UNMARKED)
    result = pytester.runpytest(
        "-p", "no:randomly", "--cudaperf-leak-sweep", "--cudaperf-json=out.json"
    )
    text = result.stdout.str()
    count = UNMARKED.count("\ndef test_")
    assert count == 17
    assert result.parseoutcomes().get("failed", 0) == 0, text[-6000:]
    sweep = json.loads((pytester.path / "out.json").read_text())["leak_sweep"]
    assert sweep["leaking"] == [], text[-6000:]
    assert sweep["unchecked"] == {}, text[-6000:]
    assert sweep["checked"] == count, text[-6000:]
    result.stdout.fnmatch_lines([f"leak sweep (fail): {count} checked (*), 0 leaking, 0 unch*"])


def test_five_planted_leaks_fail_naming_the_planted_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_planted=PLANTED)
    result = pytester.runpytest("-p", "no:randomly", "--cudaperf-leak-sweep")
    text = result.stdout.str()
    planted = _planted_lines()
    assert len(planted) == 5
    assert result.parseoutcomes().get("failed") == 5, text[-8000:]
    result.stdout.fnmatch_lines_random(
        [f"LEAKED test_planted.py::{name}: leak: * on cuda:0" for name in planted]
    )
    result.stdout.fnmatch_lines_random(
        [f"    * in 1 block at test_planted.py:{line} in {name}" for name, line in planted.items()]
    )
    result.stdout.fnmatch_lines(["leak sweep (fail): 5 checked (5 re-run), 5 leaking, 0 unch*"])
