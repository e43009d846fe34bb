"""What the blocker's SM clock readings show under sustained bf16 GEMM load (the power cap).

Measures a hot 4096² bf16 GEMM twelve times back to back with the plugin's CUDA backend (about
0.1 s each, so ~1.5 s of sustained load) and prints, per measurement, the median, the SM clock the
spin blocker read before its samples (p10 / median / p90), NVML's reading where available, and
the warnings.

Run: python benchmarks/diagnostics/diag_power_cap.py > rows.jsonl
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pytest_cudaperf.measure.cuda import CudaBackend
from pytest_cudaperf.measure.timing import Budget, measure

DEV = torch.device("cuda:0")


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    a = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)
    backend = CudaBackend(DEV, "hot", props.L2_cache_size, str(props.uuid))
    for rep in range(12):
        backend.reset()
        m = measure(backend, lambda: torch.mm(a, b), Budget.for_tolerance(0.01, max_time=0.3))
        row = {
            "rep": rep,
            "median_us": round(m.median_ms * 1e3, 2),
            "spin_sm_mhz": m.clocks.get("spin_sm_mhz"),
            "nvml_sm_mhz": [m.clocks.get("sm_mhz_min"), m.clocks.get("sm_mhz_max")],
            "warnings": list(m.warnings),
        }
        print(json.dumps(row), flush=True)
    backend.close()


if __name__ == "__main__":
    main()
