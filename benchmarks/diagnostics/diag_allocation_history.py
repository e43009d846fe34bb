"""Does a process's allocation history change how fast a memory-bound op runs in it?

Times ``torch.mul(x, 1.5)`` on 2**20 floats (the CPU suite's ``test_mul_scalar[1048576]``) in fresh
processes that first did nothing, or first made and dropped a few 16 MiB tensors (what the serial
suite does before that test, and an xdist worker's share of the suite may not), with one
intra-op thread, and counts minor page faults per call (a fault per call would mean the output
buffer is fresh memory each time).

    python benchmarks/diagnostics/diag_allocation_history.py

Results: benchmarks/RESULTS.md, CPU A/A session 6.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import resource, sys, time, torch
torch.set_num_threads(1)
if sys.argv[1] == "after 16 MiB tensors":
    for _ in range(3):
        torch.randn(1 << 22) * 2
x = torch.randn(1 << 20)
for _ in range(20):
    torch.mul(x, 1.5)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = time.perf_counter()
for _ in range(200):
    torch.mul(x, 1.5)
per_call = (time.perf_counter() - start) / 200 * 1e6
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / 200
print(f"| {sys.argv[1]} | {per_call:.0f} | {faults:.1f} |", flush=True)
"""


def main() -> None:
    print("| process history | µs per call | minor faults per call |")
    print("|---|---|---|")
    for _ in range(3):
        for history in ("fresh", "after 16 MiB tensors"):
            subprocess.run([sys.executable, "-c", CHILD, history], check=True)


if __name__ == "__main__":
    main()
