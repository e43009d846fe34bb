"""The dashboard of a synthetic run history, and the screenshot in docs/images/dashboard.png.

Writes 24 runs' ``--cudaperf-json`` reports of a made-up suite on two made-up device classes
(``GPU A``, ``GPU B``: GPU B's runs start at the fifth commit), each series with its interval
and a kernel breakdown, as ``--cudaperf-update`` runs record them: ``test_attention`` 12% slower
from the fifteenth commit on both classes (its flash-attention kernel replaced by a softmax and a
GEMM), ``test_mlp`` 8% faster from the eighth, ``test_layernorm`` creeping up 0.4% a run over the
last 14 runs on GPU A. Then ``cudaperf history ingest`` and ``cudaperf dashboard`` (their output
on stdout and stderr), and ``screenshot-report.sh`` (headless Chromium, offline)
screenshots ``test_attention``'s page with GPU A's change point clicked::

    python scripts/dashboard-demo.py --out out/dashboard-demo --png docs/images/dashboard.png

Needs Debian's chromium (``apt-get install chromium``); about 5 s.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_cudaperf.breakdown.model import Breakdown, Kernel  # noqa: E402
from pytest_cudaperf.keys import SeriesKey  # noqa: E402
from pytest_cudaperf.report.document import Report, write_report  # noqa: E402
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome  # noqa: E402
from pytest_cudaperf.series import Record, Recording  # noqa: E402
from pytest_cudaperf.verdict import Kind, Verdict  # noqa: E402

RUNS = 24
ATTENTION = "tests/test_model.py::test_attention[bf16-2048]"
MLP = "tests/test_model.py::test_mlp[bf16]"
LAYERNORM = "tests/test_ops.py::test_layernorm"
#: device class -> how much slower than GPU A
CLASSES = {"GPU A": 1.0, "GPU B": 1.9}


def kernels(entries: list[tuple[str, float]]) -> dict[str, Any]:
    """A CUDA breakdown's JSON: each kernel launched once per call, its time in µs."""
    return Breakdown(
        backend="cuda",
        calls=20,
        total_us=round(sum(us for _, us in entries), 1),
        host_us=35.0,
        entries=tuple(Kernel(name, name, 1.0, round(us, 1)) for name, us in entries),
    ).to_json()


def judged(
    key: tuple[str, str, str], ms: float, stored: dict[str, Any], verdict: Kind
) -> JudgedRecord:
    """(node id, device class, day)'s time of ``ms``, its interval ±0.7%."""
    nodeid, device_class, day = key
    recording = Recording(day, ms, 0.004, 200, ci=(ms * 0.993, ms * 1.007))
    record = Record(
        SeriesKey(nodeid), "time:device/cold", device_class, "ms", recording, {}, stored
    )
    return JudgedRecord(record, Verdict(verdict, ratio=1.0))


def run(i: int, rng: random.Random) -> list[tuple[str, JudgedRecord]]:
    """Run ``i``'s records."""
    found = []
    for device_class, slower in CLASSES.items():
        if device_class == "GPU B" and i < 4:
            continue

        def noisy(ms: float, s: float = slower) -> float:
            return ms * s * rng.gauss(1.0, 0.004)

        if i >= 14:  # the flash kernel no longer taken: softmax and a second GEMM
            attention = [
                ("sm90_xmma_gemm_bf16bf16_bf16f32_128x128", 410.0),
                ("softmax_warp_forward", 150.0),
                ("sm90_xmma_gemm_bf16bf16_bf16f32_64x128", 395.0),
            ]
        else:
            attention = [
                ("flash_fwd_kernel", 660.0),
                ("sm90_xmma_gemm_bf16bf16_bf16f32_128x128", 190.0),
            ]
        gemm = ("sm90_xmma_gemm_bf16bf16_bf16f32_256x128", 310.0 * (0.89 if i >= 7 else 1.0))
        mlp = [gemm, ("vectorized_elementwise_kernel<gelu>", 42.0)]
        creep = 1.004 ** max(0, i - 10) if device_class == "GPU A" else 1.0
        norm = [("layer_norm_kernel", 88.0 * creep)]
        regressed = Kind.REGRESSION if i == 14 else Kind.PASS
        for nodeid, entries, verdict in (
            (ATTENTION, attention, regressed),
            (MLP, mlp, Kind.IMPROVED if i == 7 else Kind.PASS),
            (LAYERNORM, norm, Kind.PASS),
        ):
            ms = noisy(sum(us for _, us in entries) / 1000 + 0.02)
            stored = kernels([(n, us * slower) for n, us in entries])
            day = f"2026-11-{i + 1:02d}"
            found.append((nodeid, judged((nodeid, device_class, day), ms, stored, verdict)))
    return found


def reports(folder: Path) -> list[Path]:
    rng = random.Random(11)
    paths = []
    for i in range(RUNS):
        commit = hashlib.sha1(f"commit {i}".encode()).hexdigest()
        outcomes: dict[str, list[JudgedRecord]] = {}
        for nodeid, record in run(i, rng):
            outcomes.setdefault(nodeid, []).append(record)
        env = {
            "source": {"commit": commit, "dirty": False, "branch": "main"},
            "recorded_at": f"2026-11-{i + 1:02d}T03:00:00+00:00",
        }
        report = Report(
            tests=tuple(TestOutcome(n, tuple(r)) for n, r in sorted(outcomes.items())),
            run_id=f"nightly-{i + 1}",
            environment=env,
        )
        paths.append(folder / f"nightly-{i + 1:02d}.json")
        write_report(paths[-1], report)
    return paths


def screenshot(page: Path, png: Path, anchor: str = "", height: int = 1240) -> None:
    """``page`` (with ``#anchor``) as a PNG, by ``screenshot-report.sh``."""
    png.parent.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve().with_name("screenshot-report.sh")
    target = f"{page}#{anchor}" if anchor else str(page)
    subprocess.run(
        ["bash", str(script), target, str(png), f"1200,{height}"], check=True, capture_output=True
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/dashboard-demo"))
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    written = reports(args.out)
    cli = [sys.executable, "-m", "pytest_cudaperf.cli"]
    history = "perf-history.sqlite"
    names = [p.name for p in written]
    subprocess.run([*cli, "history", "ingest", history, *names], cwd=args.out, check=True)
    subprocess.run([*cli, "dashboard", history, "site"], cwd=args.out, check=True)
    page = next((args.out / "site" / "tests").glob("tests_test_model.py_test_attention*.html"))
    screenshot(page, args.png, "cp-0-0-0")
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
