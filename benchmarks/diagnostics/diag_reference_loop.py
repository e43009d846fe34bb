"""Which part of the CPU backend's reference loop follows a slowdown that a neighbour on the other
core causes? Times the loop's two parts (``cpu.interpret_and_copy``: interpreter and a 1 MiB copy;
``cpu.scattered_reads``: reads scattered over 8 MiB) and a sort of 300,000 floats (the CPU suite's
``test_sorted_list[300000]`` sorts as many ints), alone and beside three competitors on the other
core: a spinning interpreter, a streaming sum over 64 MiB, and random gathers over 64 MiB.

    python benchmarks/diagnostics/diag_reference_loop.py

Run it on an otherwise idle machine (results: benchmarks/RESULTS.md, CPU A/A session 6).
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_cudaperf.measure import cpu

COMPETITORS = {
    "spin": "while True: pass",
    "stream": "import numpy as np\na = np.ones(8 << 20)\nwhile True: a.sum()",
    "random": (
        "import numpy as np\na = np.ones(8 << 20)\ni = np.random.randint(0, a.size, 1 << 20)\n"
        "while True: a[i].sum()"
    ),
}
DATA = [random.random() for _ in range(300_000)]


def fastest_ms(fn: Callable[[], object], reps: int = 3) -> float:
    best = min(_once(fn) for _ in range(reps))
    return best / 1e6


def _once(fn: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - start


def row(label: str) -> list[float]:
    parts = [
        statistics.median(fastest_ms(cpu.interpret_and_copy) for _ in range(7)),
        statistics.median(fastest_ms(cpu.scattered_reads) for _ in range(7)),
        statistics.median(fastest_ms(lambda: sorted(DATA), reps=1) for _ in range(7)),
    ]
    print(f"| {label} | " + " | ".join(f"{p:.3f}" for p in parts) + " |", flush=True)
    return parts


def main() -> None:
    print("| other core | interpret + copy (ms) | scattered reads (ms) | sort 300,000 (ms) |")
    print("|---|---|---|---|")
    row("idle")
    for name, code in COMPETITORS.items():
        competitor = subprocess.Popen([sys.executable, "-c", code])
        try:
            time.sleep(1.0)
            row(name)
        finally:
            competitor.kill()
            competitor.wait()
        time.sleep(0.5)
    row("idle again")


if __name__ == "__main__":
    main()
