"""xdist isolation check: a suite of perf tests and GPU-loading functional tests, run serially and
with `-n 4` on one GPU. The perf measurements take the GPU exclusively while the load tests hold
it shared, so their medians should agree with the serial run within noise.

    python benchmarks/bench_xdist.py --out out/
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _table import publish

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_cudaperf.cli.sources import report_records
from pytest_cudaperf.report.document import read_report

SUITE = """
import time
import pytest
import torch

@pytest.mark.parametrize("i", range({perf}))
def test_perf_gemm(i, cuda_timer, cuda_device):
    a = torch.randn({gemm}, {gemm}, device=cuda_device, dtype=torch.bfloat16)
    cuda_timer(torch.mm, a, a, cache="hot")

@pytest.mark.parametrize("i", range({perf}))
def test_perf_stream(i, cuda_timer, cuda_device):
    x = torch.randn({stream}, device=cuda_device)
    y = torch.empty_like(x)
    cuda_timer(torch.mul, x, 2.0, out=y)

@pytest.mark.parametrize("i", range({load}))
def test_load(i, cuda_device):
    a = torch.randn({gemm_load}, {gemm_load}, device=cuda_device, dtype=torch.bfloat16)
    end = time.perf_counter() + {load_s}
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        if torch.cuda.is_available():
            torch.cuda.synchronize()
"""
#: the suite's sizes on the GPU, and the smoke run's on the CPU
SIZES = {"perf": 6, "gemm": 4096, "stream": 32 << 20, "load": 8, "gemm_load": 8192, "load_s": 1.0}
SMOKE = {"perf": 1, "gemm": 64, "stream": 1 << 12, "load": 2, "gemm_load": 64, "load_s": 0.05}


def medians(report: Path) -> dict[str, float]:
    """Each test's time (ms) in a --cudaperf-json report, by the test's name and parameters."""
    return {
        record.key.nodeid.split("::")[-1]: record.value
        for record, _ in report_records(read_report(report))
        if record.series.startswith("time:")
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: on the CPU, 2 tiny perf tests and 2 short load tests, -n 1",
    )
    args = parser.parse_args()
    workers, sizes = ("1", SMOKE) if args.smoke else ("4", SIZES)
    extra_args = ["--cudaperf-max-time=0.05"] if args.smoke else []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_load.py").write_text(SUITE.format(**sizes))
        for label, extra in (("serial", []), ("-n", ["-n", workers])):
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
                    *extra_args,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
            results[label] = medians(report)
    lines = [
        f"| test | serial median | -n {workers} median (with {sizes['load']} GPU-loading tests) "
        "| change |",
        "|---|---|---|---|",
    ]
    changes = []
    for key in sorted(results["serial"]):
        a, b = results["serial"][key], results["-n"][key]
        changes.append(b / a - 1)
        lines.append(f"| {key} | {a * 1e3:.1f} µs | {b * 1e3:.1f} µs | {b / a - 1:+.2%} |")
    lines.append(f"| **largest change** | | | {max(changes, key=abs):+.2%} |")
    publish(lines, out, "RESULTS-xdist.md")


if __name__ == "__main__":
    main()
