"""Speed of light and energy on a GPU: the counted work of example kernels against their analytic
figures and their share of the ceilings; a 4096^3 bf16 GEMM's joules per call in three fresh
processes; the wall time --cudaperf-roofline and --cudaperf-energy add to the 30-kernel suite.

    python benchmarks/bench_roofline.py --out out/roofline          # all three, ~3-4 min on an H100
    python benchmarks/bench_roofline.py --out out/roofline --skip-suite

Needs a CUDA GPU and, for the energy, nvidia-ml-py (the `nvml` extra). Writes roofline.md,
energy.md and cost.md (Markdown tables) and the raw JSON reports under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _table import publish
from bench_suite import plugin_env

ROOT = Path(__file__).resolve().parents[1]

MB256 = 64 * 2**20  # float32 elements in 256 MiB
KERNELS = f"""
import torch
import torch.nn.functional as F

dev = "cuda"
X, Y, Z = (torch.randn({MB256}, device=dev) for _ in range(3))
A = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
B = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
IMG = torch.randn(32, 64, 56, 56, device=dev, dtype=torch.bfloat16)
W = torch.randn(128, 64, 3, 3, device=dev, dtype=torch.bfloat16)
Q, K, V = (torch.randn(8, 16, 2048, 128, device=dev, dtype=torch.bfloat16) for _ in range(3))
M = X.view(8192, 8192)
MT = torch.empty_like(M)

def test_gemm_bf16(cuda_timer):
    cuda_timer(torch.mm, A, B)

def test_copy(cuda_timer):
    cuda_timer(lambda: Y.copy_(X))

def test_copy_transposed(cuda_timer):
    cuda_timer(lambda: MT.copy_(M.t()))

def test_add(cuda_timer):
    cuda_timer(lambda: torch.add(X, Y, out=Z))

def test_sum(cuda_timer):
    cuda_timer(X.sum)

def test_conv2d(cuda_timer):
    cuda_timer(F.conv2d, IMG, W, padding=1)

def test_sdpa(cuda_timer):
    cuda_timer(F.scaled_dot_product_attention, Q, K, V)
"""

F32 = 4 * MB256
#: test -> (analytic FLOPs, analytic bytes, what the bytes are)
ANALYTIC: dict[str, tuple[float, float, str]] = {
    "test_gemm_bf16": (2 * 4096**3, 3 * 4096 * 4096 * 2, "A, B, C"),
    "test_copy": (0, 2 * F32, "2 x 256 MiB"),
    "test_copy_transposed": (0, 2 * F32, "2 x 256 MiB"),
    "test_add": (0, 3 * F32, "3 x 256 MiB"),
    "test_sum": (0, F32, "256 MiB read"),
    "test_conv2d": (
        2 * 32 * 128 * 64 * 9 * 56 * 56,
        (32 * 64 * 56 * 56 + 128 * 64 * 9 + 32 * 128 * 56 * 56) * 2,
        "input, weight, output",
    ),
    "test_sdpa": (4 * 8 * 16 * 2048 * 2048 * 128, 4 * 8 * 16 * 2048 * 128 * 2, "Q, K, V, O"),
}

GEMM = """
import torch
A = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
B = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

def test_gemm(cuda_timer):
    cuda_timer(torch.mm, A, B)
"""


def pytest_run(folder: Path, args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=plugin_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - began, done


def records(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    report = json.loads(path.read_text())
    return {
        (r["nodeid"].rsplit("::", 1)[-1], r["series"]): r
        for t in report["tests"]
        for r in t["records"]
    }


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def kernels_table(work: Path, out: Path) -> None:
    (work / "test_kernels.py").write_text(KERNELS)
    report = out / "kernels.json"
    _, done = pytest_run(work, ["test_kernels.py", "--cudaperf-roofline", "--cudaperf-energy",
                                f"--cudaperf-json={report}"])  # fmt: skip
    print(done.stdout[-3000:])
    found = records(report)
    lines = [
        "| kernel | FLOP counted / analytic | bytes counted / analytic | median | achieved | "
        "bound | % of measured | % of datasheet | J/call |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for test, (flops, nbytes, what) in ANALYTIC.items():
        time_record = next(r for (t, s), r in found.items() if t == test and s.startswith("time"))
        roof = time_record["roofline"]
        work_ = roof["work"]
        counted = work_["read_bytes"] + work_["written_bytes"]
        energy = found.get((test, "energy:call"))
        joules = f"{energy['recording']['median']:.4g}" if energy else "—"
        rate = roof["byte_rate"] if roof["bound"] == "memory" else roof["flop_rate"]
        unit = "TB/s" if roof["bound"] == "memory" else "TFLOP/s"
        lines.append(
            f"| {test.removeprefix('test_')} | {work_['flops']:.4g} / {flops:.4g} | "
            f"{counted:.4g} / {nbytes:.4g} ({what}, {counted / nbytes - 1:+.2%}) | "
            f"{time_record['recording']['median']:.4g} ms | {rate / 1e12:.3g} {unit} | "
            f"{roof['bound']} | "
            f"{pct(roof['fraction_measured'])} | {pct(roof['fraction_datasheet'])} | {joules} |"
        )
    publish(lines, out, "roofline.md")


def energy_table(work: Path, out: Path, processes: int) -> None:
    (work / "test_gemm.py").write_text(GEMM)
    lines = ["| process | J/call | mean power | calls | window | ± (one update) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    values = []
    for i in range(processes):
        report = out / f"gemm-{i}.json"
        _, done = pytest_run(
            work, ["test_gemm.py", "--cudaperf-energy", f"--cudaperf-json={report}"]
        )
        energy = records(report).get(("test_gemm", "energy:call"))
        if energy is None:
            print(done.stdout[-2000:])
            lines.append(f"| {i + 1} | no figure (see the run's details) | | | | |")
            continue
        e = energy["energy"]
        values.append(e["joules_per_call"])
        lines.append(
            f"| {i + 1} | {e['joules_per_call']:.4g} | {e['watts']:.0f} W | {e['calls']} | "
            f"{e['window_s']:.2f} s | {e['update_s'] / e['window_s']:.1%} "
            f"({e['update_s'] * 1e3:.3g} ms updates, {e['step_mj']} mJ steps) |"
        )
    if len(values) > 1:
        median = statistics.median(values)
        spread = max(abs(v / median - 1) for v in values)
        lines.append(f"| spread | ±{spread:.1%} of the median {median:.4g} J | | | | |")
    publish(lines, out, "energy.md")


def suite_cost(out: Path) -> None:
    suite = ROOT / "benchmarks" / "suite_gpu"
    lines = ["| run | wall | added |", "|---|---|---|"]
    plain = None
    for name, extra in (
        ("plain", []),
        ("--cudaperf-roofline", ["--cudaperf-roofline"]),
        ("plain (again)", []),
        ("--cudaperf-energy", ["--cudaperf-energy"]),
    ):
        wall, done = pytest_run(suite, ["-q", *extra])
        print(name, f"{wall:.1f} s", done.stdout.strip().splitlines()[-1:])
        if plain is None:
            plain = wall
        lines.append(f"| {name} | {wall:.1f} s | {wall / plain - 1:+.1%} |")
    publish(lines, out, "cost.md")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/roofline")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--skip-suite", action="store_true")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "pytest.ini").write_text("[pytest]\n")
        kernels_table(work, out)
        energy_table(work, out, args.processes)
    if not args.skip_suite:
        suite_cost(out)


if __name__ == "__main__":
    main()
