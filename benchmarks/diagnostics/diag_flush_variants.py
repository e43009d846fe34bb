"""Does the way L2 is flushed decide the slow/fast state of small cold kernels?

The SM clock, idle gaps, sleeps, bursts and warm-up length did not change how often a round of
the cold 8 MiB add or the cold 512² matmul lands in the slow state (``diag_clock_state.py``), and
the two kernels do not change state at the same moments (``diag_state_timeline.py``). What every
cold sample shares is the flush. Here each variant replaces the backend's flush and measures both
kernels (three rounds, as the plugin does), ``--reps`` times per process:

- ``2x``: the plugin's flush, a read of twice the L2 size;
- ``1.25x`` / ``4x``: the same read over 1.25 / 4 times the L2 size;
- ``alt2``: two 2x buffers, read alternately;
- ``zero256``: triton do_bench's flush, writing 256 MiB of zeros (dirty lines);
- ``8x``: a read of eight times the L2 size;
- ``2x+discard`` / ``2x-last+discard``: the 2x read (plain, or with the ``evict_last`` hint),
  then ``discard.global.L2`` over the buffer, which leaves those lines invalid: an empty L2;
- ``own+2x+discard``: the kernel's own tensors discarded first (did some of them survive the
  read?); ``8x+discard``: an 8x read, then discarded.

``--variants`` picks some (comma-separated). The committed rows were taken when the plugin's
``L2Flush`` read only and this script had its own copy of the discard kernel; the read-only
variants now ask for ``discard=False`` and the discarding ones use the plugin's flush and kernel
(the same code).

Run: python benchmarks/diagnostics/diag_flush_variants.py --seed 0 > rows.jsonl (several processes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pytest_cudaperf.measure._spin import discard_lines
from pytest_cudaperf.measure.cuda import CudaBackend, L2Flush
from pytest_cudaperf.measure.timing import Budget, measure

DEV = torch.device("cuda:0")


@triton.jit
def read_last(src_ptr, out_ptr, n, block: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * block + tl.arange(0, block)
    values = tl.load(src_ptr + offsets, mask=offsets < n, other=0.0, eviction_policy="evict_last")
    tl.store(out_ptr + pid, tl.max(values, axis=0))


class DiscardFlush:
    """The plugin's read-then-discard flush; with ``last`` its read carries the ``evict_last``
    hint, with ``own`` the timed kernel's tensors are discarded first."""

    def __init__(self, l2: int, last: bool, own: tuple[torch.Tensor, ...] = ()) -> None:
        self.flush = L2Flush(torch, DEV, l2)
        if self.flush.method != "read+discard":
            raise RuntimeError(f"no discard on this device (flush: {self.flush.method})")
        self.last = last
        self.own = own

    def __call__(self) -> None:
        f = self.flush
        for t in self.own:  # the timed kernel's own lines first
            discard_lines[(t.numel() // 32 // f.DISCARD_BLOCK,)](t, block=f.DISCARD_BLOCK)
        if not self.last:
            f()
            return
        read_last[f._grid](f.buffer, f._partial, f.n, block=f.BLOCK)
        discard_lines[f._discard_grid](f.buffer, block=f.DISCARD_BLOCK)


def read_only(l2: int) -> L2Flush:
    """The read alone (the plugin's flush before the discard)."""
    return L2Flush(torch, DEV, l2, discard=False)


def flushes(l2: int, own: tuple[torch.Tensor, ...]) -> dict[str, Callable[[], None]]:
    two = [read_only(l2), read_only(l2)]
    turn = [0]

    def alternate() -> None:
        turn[0] ^= 1
        two[turn[0]]()

    zeros = torch.empty(256 << 20, dtype=torch.uint8, device=DEV)
    return {
        "2x": read_only(l2),
        "1.25x": read_only(l2 * 5 // 8),
        "4x": read_only(2 * l2),
        "alt2": alternate,
        "zero256": zeros.zero_,
        "8x": read_only(4 * l2),
        **discarding(l2, own),
    }


def discarding(l2: int, own: tuple[torch.Tensor, ...]) -> dict[str, Callable[[], None]]:
    found: dict[str, Callable[[], None]] = {}
    for name, size, last, mine in (
        ("2x+discard", l2, False, ()),
        ("2x-last+discard", l2, True, ()),
        ("own+2x+discard", l2, False, own),
        ("8x+discard", 4 * l2, False, ()),
    ):
        try:
            found[name] = DiscardFlush(size, last, mine)
        except Exception as exc:  # noqa: BLE001
            print(f"{name} unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--variants", default="")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    backend = CudaBackend(DEV, "cold", props.L2_cache_size, str(props.uuid))
    a, b, c = (torch.randn(1 << 21, device=DEV) for _ in range(3))
    x, y = torch.randn(512, 512, device=DEV), torch.randn(512, 512, device=DEV)
    work = {"add 8 MiB": lambda: torch.add(a, b, out=c), "matmul 512²": lambda: torch.mm(x, y)}
    budget = Budget.for_tolerance(0.05, max_time=0.6)
    variants = flushes(props.L2_cache_size, (a, b, c, x, y))
    if args.variants:
        variants = {k: v for k, v in variants.items() if k in args.variants.split(",")}
    for rep in range(args.reps):
        for variant, flush in variants.items():
            backend.flush = flush  # type: ignore[assignment]
            for kernel, fn in work.items():
                backend.reset()
                m = measure(backend, fn, budget)
                row = {"process": args.seed, "rep": rep, "variant": variant, "kernel": kernel}
                print(json.dumps({**row, "rounds": list(m.round_medians_ms)}), flush=True)


if __name__ == "__main__":
    main()
