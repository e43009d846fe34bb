"""xdist isolation check: a suite of perf tests and GPU-loading functional tests, run serially and
with `-n 4` on one GPU. The perf measurements take the GPU exclusively while the load tests hold
it shared, so their medians should agree with the serial run within noise.

    python benchmarks/bench_xdist.py --out out/
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _table import publish

SUITE = """
import time
import pytest
import torch

@pytest.mark.parametrize("i", range(6))
def test_perf_gemm(i, cuda_timer, cuda_device):
    a = torch.randn(4096, 4096, device=cuda_device, dtype=torch.bfloat16)
    cuda_timer(torch.mm, a, a, cache="hot")

@pytest.mark.parametrize("i", range(6))
def test_perf_stream(i, cuda_timer, cuda_device):
    x = torch.randn(32 << 20, device=cuda_device)
    y = torch.empty_like(x)
    cuda_timer(torch.mul, x, 2.0, out=y)

@pytest.mark.parametrize("i", range(8))
def test_load(i, cuda_device):
    a = torch.randn(8192, 8192, device=cuda_device, dtype=torch.bfloat16)
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
"""


def medians(report: Path) -> dict[str, float]:
    data = json.loads(report.read_text())
    return {
        r["key"].split("::")[-1]: r["value"]
        for t in data["tests"]
        for r in t["records"]
        if r["series"].startswith("time:")
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_load.py").write_text(SUITE)
        for label, extra in (("serial", []), ("-n 4", ["-n", "4"])):
            report = folder / f"{label.replace(' ', '')}.json"
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    str(folder),
                    f"--cudaperf-json={report}",
                    *extra,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
            results[label] = medians(report)
    lines = [
        "| test | serial median | -n 4 median (with 8 GPU-loading tests) | change |",
        "|---|---|---|---|",
    ]
    changes = []
    for key in sorted(results["serial"]):
        a, b = results["serial"][key], results["-n 4"][key]
        changes.append(b / a - 1)
        lines.append(f"| {key} | {a * 1e3:.1f} µs | {b * 1e3:.1f} µs | {b / a - 1:+.2%} |")
    lines.append(f"| **largest change** | | | {max(changes, key=abs):+.2%} |")
    publish(lines, out, "RESULTS-xdist.md")


if __name__ == "__main__":
    main()
