"""Why does the second of three rounds sit ~20% high? (issue 12)

Issue 12: ``x.sum()`` over 1,024 floats, measured first in 14 fresh processes (cold L2, default
budget), had round medians like ``[4.64, 5.60, 4.61]`` µs: in 8 of 14 processes the *second*
round sat near 5.4-5.6 µs while the first and third sat near 4.5-4.6 µs.

What differs for round 2, read from ``measure/timing.py::measure`` and ``measure/cuda.py``:

H1 event slots (fixed in cuda.py, see ``CudaBackend._events``). Each round's sampler created
   its own 64 pairs of timing events; the driver creates them at first record, and the previous
   round's sampler (and its events) is freed when the next is bound. If the driver recycles
   freed events last-in-first-out, round 2 gets the slots in reverse order (its start events
   where round 1's stop events were) and round 3 the original order back: 1 and 3 alike, 2 apart
   — the exact pattern. Variants: ``fresh_events`` (the old per-sampler events, freed between
   rounds), ``keep_events`` (per-sampler events never freed, so no slot is reused), ``plugin``
   (the fix: one set of events for every round).
H2 the dry run. Only round 1 is preceded by the 20 ms synchronisation dry run (a sleep kernel,
   then the callable): rounds 2 and 3 are not. It cannot set round 2 apart from round 3 alone,
   but it shapes the timeline that H3 depends on. Variants: ``dry_each`` (before every round),
   ``no_dry`` (never).
H3 a device state that depends on time (clock or power-state transient after the GPU wakes,
   round 2 lying ~0.35-0.7 s after the backend was built). Variants: ``rounds5`` (does the
   high round follow the position, 2 — or 2 and 4 under H1 — or the time?), ``idle_gap`` (0.3 s
   idle before each round), ``prewarm`` (1 s of GEMMs before the backend). Per round the table
   shows the blocker's SM clock; the JSON rows also carry NVML's SM and memory clocks.
H4 the flush (read of 2 x L2 then discard before every sample). Variant ``hot``.
H5 the host (garbage collection, allocator work between rounds): variant ``gc_off``; the rows
   carry the host's enqueue time per sample of each round (it sets the spin's length).
``measure`` runs the plugin's own ``measure()`` (round medians only) to check that the
replica used by the other variants behaves like it.

Run on the GPU machine (each row is a fresh process; variants interleaved so that drift over the
run does not line up with a variant):

    python benchmarks/diagnostics/diag_second_round.py --procs 6
    python benchmarks/diagnostics/diag_second_round.py --procs 4 --variants plugin,fresh_events

Prints one line per process and a table per variant: processes whose rounds split (highest
round median / lowest > 1.10), which round was high, median round medians and blocker SM clock
per round. With ``$OUT`` set, rows go to ``$OUT/diag-second-round.jsonl``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

VARIANTS = (
    "plugin",
    "measure",
    "fresh_events",
    "keep_events",
    "dry_each",
    "no_dry",
    "rounds5",
    "idle_gap",
    "prewarm",
    "hot",
    "gc_off",
)
SPLIT = 1.10


def _nvml_clocks(uuid: str) -> dict[str, int]:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(
            uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        )
        return {
            "sm": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "mem": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        }
    except Exception:  # noqa: BLE001 - NVML is optional here
        return {}


def child(variant: str, process: int) -> dict[str, Any]:  # noqa: PLR0915 - one branch per variant
    import torch

    from pytest_cudaperf import devices
    from pytest_cudaperf.measure import cuda
    from pytest_cudaperf.measure.timing import Budget, SynchronizesInside, measure, run_adaptive

    probe = devices.probe()
    gpu = probe.gpus[0]
    dev = torch.device("cuda:0")
    x = torch.randn(1024, device=dev)

    def fn() -> object:
        return x.sum()

    if variant == "prewarm":
        a = torch.randn(4096, 4096, device=dev)
        began = time.perf_counter()
        while time.perf_counter() - began < 1.0:
            a @ a
        torch.cuda.synchronize()
        del a
    if variant == "gc_off":
        gc.collect()
        gc.disable()
    budget = Budget.for_tolerance(0.05)
    t_backend = time.perf_counter()
    backend = cuda.CudaBackend(dev, "hot" if variant == "hot" else "cold", gpu.l2_bytes, gpu.uuid)
    row: dict[str, Any] = {"variant": variant, "process": process, "gpu": gpu.name}
    if variant == "measure":
        m = measure(backend, fn, budget)
        row["round_us"] = [round(v * 1e3, 3) for v in m.round_medians_ms]
        row["instability"] = list(m.instability)
        row["sm_mhz"] = m.sm_mhz
        backend.close()
        return row
    rounds = 5 if variant == "rounds5" else budget.rounds
    per_round = budget.per_round()  # the same per-round budget for rounds5: same timeline
    if variant == "no_dry":
        backend._synchronizing.append((fn, False))
    kept: list[Any] = []
    per: list[dict[str, Any]] = []
    sampler = None
    for index in range(rounds):
        if variant == "idle_gap":
            time.sleep(0.3)
        if variant == "dry_each":
            backend._synchronizing = [(f, a) for f, a in backend._synchronizing if f is not fn]
        backend.clocks.reset()
        start = time.perf_counter() - t_backend
        nvml_before = _nvml_clocks(gpu.uuid)
        # the same steps as timing.measure(): a fresh sampler bound to the same name
        sampler = backend.sampler(fn, False)
        if variant in ("fresh_events", "keep_events"):
            sampler._events = cuda.event_pairs(torch)  # the old per-sampler events
        if variant == "keep_events":
            kept.append(sampler)
        try:
            result = run_adaptive(sampler, per_round)
        except SynchronizesInside:
            backend.recover(sampler)
            result = run_adaptive(sampler, per_round)
        samples = result.samples
        third = max(1, len(samples) // 3)
        spin = backend.clocks.spin_quantiles()
        per.append(
            {
                "round": index + 1,
                "start_s": round(start, 3),
                "median_us": round(statistics.median(samples) * 1e3, 3),
                "thirds_us": [
                    round(statistics.median(part) * 1e3, 3)
                    for part in (
                        samples[:third],
                        samples[third:-third] or samples,
                        samples[-third:],
                    )
                ],
                "n": len(samples),
                "warmup_batches": result.warmup_batches,
                "spin_mhz": round(spin[1], 1) if spin else None,
                "nvml_before": nvml_before,
                "nvml_after": _nvml_clocks(gpu.uuid),
                "enqueue_us": round(sampler._enqueue_s * 1e6, 2),
            }
        )
    row["round_us"] = [r["median_us"] for r in per]
    row["rounds"] = per
    row["blocking"] = sampler.blocker.name if sampler and sampler.blocker else "none"
    row["flush"] = backend.flush.method if backend.flush else "none"
    backend.close()
    return row


def _split(round_us: list[float]) -> int | None:
    """The 1-based index of the high round when the rounds split, else None."""
    if len(round_us) < 2 or min(round_us) <= 0:
        return None
    if max(round_us) / min(round_us) <= SPLIT:
        return None
    return round_us.index(max(round_us)) + 1


def table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'variant':<13} {'procs':>5} {'split':>5} {'high round':<12} "
        f"{'median round µs':<28} {'blocker SM MHz per round'}"
    )
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant and r.get("round_us")]
        if not mine:
            continue
        highs = [_split(r["round_us"]) for r in mine]
        counts: dict[int, int] = {}
        for h in highs:
            if h is not None:
                counts[h] = counts.get(h, 0) + 1
        width = max(len(r["round_us"]) for r in mine)
        medians = [
            statistics.median(r["round_us"][i] for r in mine if len(r["round_us"]) > i)
            for i in range(width)
        ]
        mhz = []
        for i in range(width):
            values = [
                r["rounds"][i]["spin_mhz"]
                for r in mine
                if "rounds" in r and len(r["rounds"]) > i and r["rounds"][i]["spin_mhz"]
            ]
            mhz.append(f"{statistics.median(values):.0f}" if values else "-")
        high = ",".join(f"r{k}:{v}" for k, v in sorted(counts.items())) or "-"
        print(
            f"{variant:<13} {len(mine):>5} {sum(h is not None for h in highs):>5} {high:<12} "
            f"{' / '.join(f'{m:.2f}' for m in medians):<28} {' / '.join(mhz)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=6, help="fresh processes per variant")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--process", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.process)), flush=True)
        return
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(
            f"unknown variants: {', '.join(sorted(unknown))} (known: {', '.join(VARIANTS)})"
        )
    out_dir = os.environ.get("OUT")
    sink = open(os.path.join(out_dir, "diag-second-round.jsonl"), "a") if out_dir else None  # noqa: SIM115
    rows: list[dict[str, Any]] = []
    try:
        for process in range(args.procs):
            for variant in variants:  # interleaved: drift over the run hits every variant
                done = subprocess.run(
                    [
                        sys.executable,
                        os.path.abspath(__file__),
                        "--child",
                        variant,
                        "--process",
                        str(process),
                    ],
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    check=False,
                )
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                if done.returncode != 0 or not lines:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    print(f"{variant:<13} p{process}: failed ({tail})", flush=True)
                    continue
                row = json.loads(lines[-1])
                rows.append(row)
                if sink is not None:
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                shown = " / ".join(f"{v:.2f}" for v in row["round_us"])
                print(f"{variant:<13} p{process}: rounds {shown} µs", flush=True)
    finally:
        if sink is not None:
            sink.close()
    table(rows)


if __name__ == "__main__":
    main()
