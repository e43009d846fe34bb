"""Where does the per-process offset of small cold-L2 measurements come from?

In one process, measures a kernel in cold mode (the plugin's CudaBackend) while changing one thing
at a time, and prints the spread of the medians (max/min - 1) for each:

- ``repeat``: same inputs, same flush buffer (in-process repeatability);
- ``flush``: same inputs, a new flush buffer at a new address for each measurement;
- ``inputs``: same flush buffer, the inputs copied to new addresses for each measurement.

A spread under ``inputs`` or ``flush`` as large as the cross-process spread in RESULTS.md says
the offset follows the addresses of the data or of the flush buffer.

Run: python benchmarks/diagnostics/diag_cold_offset.py --seed 0
(several processes: --seed 1, 2, ...)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pytest_cudaperf.measure.cuda import CudaBackend
from pytest_cudaperf.measure.timing import Budget, measure

DEV = torch.device("cuda:0")
ROUNDS = 6


def make(kind: str) -> tuple[list[torch.Tensor], Callable[[list[torch.Tensor]], object]]:
    if kind == "matmul 512² fp32":
        return [torch.randn(512, 512, device=DEV), torch.randn(512, 512, device=DEV)], (
            lambda t: torch.mm(t[0], t[1])
        )
    if kind == "add 8 MiB":
        n = 1 << 21
        return [torch.randn(n, device=DEV) for _ in range(3)], (
            lambda t: torch.add(t[0], t[1], out=t[2])
        )
    ws = [torch.randn(1024, 1024, device=DEV) for _ in range(3)]
    bs = [torch.randn(1024, device=DEV) for _ in range(3)]
    x = torch.randn(64, 1024, device=DEV)

    def mlp(t: list[torch.Tensor]) -> object:
        h = t[0]
        for i in range(3):
            h = torch.nn.functional.linear(h, t[1 + i], t[4 + i])
            if i < 2:
                h = torch.nn.functional.gelu(h)
        return h

    return [x, *ws, *bs], mlp


def median_of(backend: CudaBackend, fn: Callable[[], object]) -> float:
    return measure(backend, fn, Budget.for_tolerance(0.05, max_time=1.0)).median_ms


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1


def outputs(seed: int) -> None:
    """Is it the address of the output? matmul with ``out=`` a fixed tensor, each of six
    tensors in turn, against the allocator's choice; and a ring that keeps the last three
    results alive so that consecutive calls write to four different blocks."""
    props = torch.cuda.get_device_properties(0)
    a, b = torch.randn(512, 512, device=DEV), torch.randn(512, 512, device=DEV)
    backend = CudaBackend(DEV, "cold", props.L2_cache_size, str(props.uuid))
    outs = [torch.empty(512, 512, device=DEV) for _ in range(6)]
    rows: dict[str, list[float]] = {"fixed_out": [], "each_out": [], "alloc": [], "ring3": []}
    for _ in range(ROUNDS):
        rows["fixed_out"].append(median_of(backend, lambda: torch.mm(a, b, out=outs[0])))
    for o in outs:
        rows["each_out"].append(median_of(backend, lambda o=o: torch.mm(a, b, out=o)))
    for _ in range(ROUNDS):
        rows["alloc"].append(median_of(backend, lambda: torch.mm(a, b)))
    ring: list[torch.Tensor] = []

    def keep() -> object:
        ring.append(torch.mm(a, b))
        if len(ring) > 3:
            ring.pop(0)
        return None

    for _ in range(ROUNDS):
        rows["ring3"].append(median_of(backend, keep))
    backend.close()
    print(
        json.dumps(
            {
                "process": seed,
                "kernel": "matmul 512² fp32 (outputs)",
                **{f"{k}_us": [round(v * 1e3, 3) for v in vals] for k, vals in rows.items()},
                **{f"{k}_spread": round(spread(vals), 4) for k, vals in rows.items()},
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--outputs", action="store_true", help="run the output-address test")
    parser.add_argument("--samples", action="store_true", help="print raw samples")
    parser.add_argument("--shared-events", action="store_true", help="reuse CUDA events")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    if args.outputs:
        outputs(args.seed)
        return
    if args.samples:
        samples(args.seed, args.shared_events)
        return
    props = torch.cuda.get_device_properties(0)
    pads = []
    for kind in ("matmul 512² fp32", "MLP forward (3 layers)", "add 8 MiB"):
        tensors, body = make(kind)
        backend = CudaBackend(DEV, "cold", props.L2_cache_size, str(props.uuid))
        rows: dict[str, list[float]] = {"repeat": [], "flush": [], "inputs": []}
        for _ in range(ROUNDS):
            rows["repeat"].append(median_of(backend, lambda b=body, t=tensors: b(t)))
        for r in range(ROUNDS):
            pads.append(torch.empty((r + 1) * 3 << 20, dtype=torch.uint8, device=DEV))
            other = CudaBackend(DEV, "cold", props.L2_cache_size, str(props.uuid))
            rows["flush"].append(median_of(other, lambda b=body, t=tensors: b(t)))
            other.close()
        for r in range(ROUNDS):
            pads.append(torch.empty((r + 1) * 5 << 20, dtype=torch.uint8, device=DEV))
            copies = [t.clone() for t in tensors]
            rows["inputs"].append(median_of(backend, lambda b=body, c=copies: b(c)))
        backend.close()
        print(
            json.dumps(
                {
                    "process": args.seed,
                    "kernel": kind,
                    **{f"{k}_us": [round(v * 1e3, 3) for v in vals] for k, vals in rows.items()},
                    **{f"{k}_spread": round(spread(vals), 4) for k, vals in rows.items()},
                }
            ),
            flush=True,
        )


def samples(seed: int, shared_events: bool) -> None:
    """Raw samples of eight back-to-back measurements per kernel (``--samples``); with
    ``--shared-events`` every measurement of a kernel reuses the first one's CUDA events."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench_worker import kernels

    from pytest_cudaperf.measure import cuda as cuda_timing

    if shared_events:
        original = cuda_timing.CudaEventSampler.__init__
        pool: list[object] = []

        def reuse(self: cuda_timing.CudaEventSampler, *args: object, **kwargs: object) -> None:
            original(self, *args, **kwargs)  # type: ignore[arg-type]
            if not pool:
                pool.append(self._events)
            self._events = pool[0]  # type: ignore[assignment]

        cuda_timing.CudaEventSampler.__init__ = reuse  # type: ignore[method-assign]
    props = torch.cuda.get_device_properties(0)
    work = kernels(1.0)
    for kernel, cache in (
        ("matmul 512² fp32", "cold"),
        ("add 8 MiB (~7 µs)", "cold"),
        ("matmul 512² fp32", "hot"),
    ):
        backend = CudaBackend(DEV, cache, props.L2_cache_size, str(props.uuid))
        for rep in range(8):
            m = measure(backend, work[kernel], Budget.for_tolerance(0.05, max_time=1.0))
            row = {
                "process": seed,
                "kernel": kernel,
                "cache": cache,
                "rep": rep,
                "shared_events": shared_events,
            }
            print(json.dumps({**row, "samples_ms": list(m.samples_ms)}), flush=True)
        backend.close()


if __name__ == "__main__":
    main()
