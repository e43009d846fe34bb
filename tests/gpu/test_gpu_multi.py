"""GPU tests that need two GPUs (they skip, with the reason, on one): under ``-n 2`` each worker
measures and checks memory on its own GPU, and nothing of the plugin creates a CUDA context on the
other one."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.gpu(count=2)
def test_workers_measure_and_check_memory_on_their_own_gpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import json
        import os

        import pytest
        import torch

        @pytest.mark.no_leak
        @pytest.mark.parametrize("i", range(4))
        def test_work(i, cuda_device, cuda_timer, memory_guard, worker_id):
            x = torch.randn(1 << 20, device=cuda_device)
            with memory_guard() as guard:
                (x * 2).sum()
            m = cuda_timer(torch.add, x, x, max_time=0.2)
            others = [d for d in range(torch.cuda.device_count()) if d != cuda_device.index]
            if os.path.exists(f"w-{worker_id}-{i}.json"):
                return  # @no_leak re-runs the body: keep what its measured call saw
            with open(f"w-{worker_id}-{i}.json", "w") as f:
                json.dump({
                    "worker": worker_id,
                    "index": cuda_device.index,
                    "measured_on": m.device,
                    "peak": guard.peak_bytes,
                    "contexts_elsewhere": [
                        d for d in others if torch._C._cuda_hasPrimaryContext(d)
                    ],
                }, f)
    """)
    result = pytester.runpytest("-n2", "--cudaperf-json=out.json")
    result.assert_outcomes(passed=4)
    rows = [json.loads(p.read_text()) for p in pytester.path.glob("w-*.json")]
    assert len(rows) == 4
    assert {row["index"] for row in rows} == {0, 1}  # both GPUs used
    for row in rows:
        assert row["index"] == int(row["worker"][2:]) % 2
        assert row["measured_on"] == f"cuda:{row['index']}"
        assert row["peak"] >= 4 << 20  # x * 2: 1M floats, on this worker's GPU
        assert row["contexts_elsewhere"] == [], row
    report = json.loads((pytester.path / "out.json").read_text())
    measured = [r for t in report["tests"] for r in t["records"] if r["series"].startswith("time")]
    # the workers' records merged into one report; @no_leak's re-runs record nothing more
    assert len(measured) == 4
