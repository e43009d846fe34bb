"""Speed of light and energy on a GPU: the counted work of example kernels against their analytic
figures and their share of the ceilings; a 4096^3 bf16 GEMM's joules per call in three fresh
processes; the wall time --cudaperf-roofline and --cudaperf-energy add to the 30-kernel suite.

    python benchmarks/bench_roofline.py --out out/roofline          # all three, ~3-4 min on an H100
    python benchmarks/bench_roofline.py --out out/roofline --skip-suite

    python benchmarks/bench_roofline.py --out out/roofline-smoke --smoke   # a CPU, seconds

Needs a CUDA GPU and, for the energy, nvidia-ml-py (the `nvml` extra). Writes roofline.md,
energy.md and cost.md (Markdown tables) and the raw JSON reports under --out. ``--smoke`` runs
the kernels on CPU tensors at tiny sizes (the work counted against the same analytic figures,
the ceiling and energy columns saying "not on a GPU") and one energy process, with a short
budget, and skips the suite.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _table import publish
from bench_suite import plugin_env

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Sizes:
    """The example kernels' device and sizes."""

    device: str
    vector: int  #: float32 elements of each vector (a square: the transposed copy's matrix)
    gemm: int  #: the bf16 GEMM's side
    conv: tuple[int, int, int, int]  #: batch, input channels, height (= width), output channels
    sdpa: tuple[int, int, int, int]  #: batch, heads, sequence, head dimension
    budget: tuple[str, ...] = ()  #: more pytest arguments for each run (a short budget)


#: on a GPU: 256 MiB vectors, a 4096^3 GEMM; ``--smoke``: a CPU, 64 KiB vectors, a 64^3 GEMM
FULL = Sizes("cuda", 64 * 2**20, 4096, (32, 64, 56, 128), (8, 16, 2048, 128))
SMOKE = Sizes(
    "cpu", 1 << 14, 64, (2, 4, 8, 8), (1, 2, 16, 8),
    ("--cudaperf-max-time=0.05", "--cudaperf-rounds=1", "-p", "no:randomly"),
)  # fmt: skip


def kernels(s: Sizes) -> str:
    """The test file of the example kernels at ``s``."""
    (n, c, hw, k), (b, h, q, d) = s.conv, s.sdpa
    side = math.isqrt(s.vector)
    return f"""
import torch
import torch.nn.functional as F

dev = "{s.device}"
X, Y, Z = (torch.randn({s.vector}, device=dev) for _ in range(3))
A = torch.randn({s.gemm}, {s.gemm}, device=dev, dtype=torch.bfloat16)
B = torch.randn({s.gemm}, {s.gemm}, device=dev, dtype=torch.bfloat16)
IMG = torch.randn({n}, {c}, {hw}, {hw}, device=dev, dtype=torch.bfloat16)
W = torch.randn({k}, {c}, 3, 3, device=dev, dtype=torch.bfloat16)
Q, K, V = (torch.randn({b}, {h}, {q}, {d}, device=dev, dtype=torch.bfloat16) for _ in range(3))
M = X.view({side}, {side})
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


def analytic(s: Sizes) -> dict[str, tuple[float, float, str]]:
    """test -> (analytic FLOPs, analytic bytes, what the bytes are) at ``s``."""
    f32 = 4 * s.vector
    vec = f"{f32 / 2**20:g} MiB"
    (n, c, hw, k), (b, h, q, d) = s.conv, s.sdpa
    return {
        "test_gemm_bf16": (2 * s.gemm**3, 3 * s.gemm**2 * 2, "A, B, C"),
        "test_copy": (0, 2 * f32, f"2 x {vec}"),
        "test_copy_transposed": (0, 2 * f32, f"2 x {vec}"),
        "test_add": (0, 3 * f32, f"3 x {vec}"),
        "test_sum": (0, f32, f"{vec} read"),
        "test_conv2d": (
            2 * n * k * c * 9 * hw * hw,
            (n * c * hw * hw + k * c * 9 + n * k * hw * hw) * 2,
            "input, weight, output",
        ),
        "test_sdpa": (4 * b * h * q * q * d, 4 * b * h * q * d * 2, "Q, K, V, O"),
    }


def gemm(s: Sizes) -> str:
    """The energy's test file: one bf16 GEMM at ``s``."""
    return f"""
import torch
A = torch.randn({s.gemm}, {s.gemm}, device="{s.device}", dtype=torch.bfloat16)
B = torch.randn({s.gemm}, {s.gemm}, device="{s.device}", dtype=torch.bfloat16)

def test_gemm(cuda_timer):
    cuda_timer(torch.mm, A, B)
"""


#: what a ceiling or energy column says of a run without a GPU
NO_GPU = "not on a GPU"


def on_gpu(path: Path) -> bool:
    """Whether the run of this JSON report saw a GPU."""
    return bool(json.loads(path.read_text())["environment"].get("gpus"))


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


def kernels_table(work: Path, out: Path, sizes: Sizes) -> None:
    (work / "test_kernels.py").write_text(kernels(sizes))
    report = out / "kernels.json"
    _, done = pytest_run(work, ["test_kernels.py", "--cudaperf-roofline", "--cudaperf-energy",
                                f"--cudaperf-json={report}", *sizes.budget])  # fmt: skip
    print(done.stdout[-3000:])
    found = records(report)
    gpu = on_gpu(report)
    lines = [
        "| kernel | FLOP counted / analytic | bytes counted / analytic | median | achieved | "
        "bound | % of measured | % of datasheet | J/call |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for test, (flops, nbytes, what) in analytic(sizes).items():
        time_record = next(r for (t, s), r in found.items() if t == test and s.startswith("time"))
        roof = time_record["roofline"]
        work_ = roof["work"]
        counted = work_["read_bytes"] + work_["written_bytes"]
        energy = found.get((test, "energy:call"))
        joules = f"{energy['recording']['median']:.4g}" if energy else ("—" if gpu else NO_GPU)
        ceilings = (
            f"{pct(roof['fraction_measured'])} | {pct(roof['fraction_datasheet'])}"
            if gpu
            else f"{NO_GPU} | {NO_GPU}"
        )
        rate = roof["byte_rate"] if roof["bound"] == "memory" else roof["flop_rate"]
        unit = "TB/s" if roof["bound"] == "memory" else "TFLOP/s"
        lines.append(
            f"| {test.removeprefix('test_')} | {work_['flops']:.4g} / {flops:.4g} | "
            f"{counted:.4g} / {nbytes:.4g} ({what}, {counted / nbytes - 1:+.2%}) | "
            f"{time_record['recording']['median']:.4g} ms | {rate / 1e12:.3g} {unit} | "
            f"{roof['bound'] or '—'} | "
            f"{ceilings} | {joules} |"
        )
    publish(lines, out, "roofline.md")


def energy_table(work: Path, out: Path, processes: int, sizes: Sizes) -> None:
    (work / "test_gemm.py").write_text(gemm(sizes))
    lines = ["| process | J/call | mean power | calls | window | ± (one update) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    values = []
    for i in range(processes):
        report = out / f"gemm-{i}.json"
        _, done = pytest_run(
            work, ["test_gemm.py", "--cudaperf-energy", f"--cudaperf-json={report}", *sizes.budget]
        )
        energy = records(report).get(("test_gemm", "energy:call"))
        if energy is None:
            print(done.stdout[-2000:])
            why = "no figure (see the run's details)" if on_gpu(report) else NO_GPU
            lines.append(f"| {i + 1} | {why} | | | | |")
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
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a CPU: the kernels at tiny sizes, one energy process, no suite, a short budget",
    )
    args = parser.parse_args()
    sizes = SMOKE if args.smoke else FULL
    if args.smoke:
        args.processes, args.skip_suite = 1, True
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "pytest.ini").write_text("[pytest]\n")
        kernels_table(work, out, sizes)
        energy_table(work, out, args.processes, sizes)
    if not args.skip_suite:
        suite_cost(out)


if __name__ == "__main__":
    main()
