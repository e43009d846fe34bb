"""Triton kernels of the CUDA backend: the spin that blocks a stream until the host releases a
pinned flag (optionally reading the SM clock while it spins), a read-only L2 flush with small
launch parameters, and the discard that leaves the flush buffer's lines invalid in L2 afterwards.

Imported only on CUDA machines that have Triton; :mod:`pytest_cudaperf.measure.cuda` falls back to
``torch.cuda._sleep`` without it.
"""

import triton
import triton.language as tl


@triton.jit
def _clock64():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit(do_not_specialize=["slot", "max_iters"])
def spin_until_released(  # noqa: PLR0913 (a kernel's arguments are its launch signature)
    flag_ptr, count_ptr, stamp_ptr, slot, max_iters, clocked: tl.constexpr
):
    """Spin until the host sets ``flag[slot]`` (or ``max_iters`` reads); record the reads at
    ``count[slot]``. ``clocked`` also stores the SM cycles and the nanoseconds it spun
    (``%clock64``, ``%globaltimer``) at ``stamp[2 * slot]`` and ``stamp[2 * slot + 1]``: the SM
    clock just before each sample, without NVML."""
    if clocked:
        t0 = _globaltimer()
        c0 = _clock64()
    done = 0
    count = 0
    while done == 0:
        value = tl.load(flag_ptr + slot, volatile=True)
        count += 1
        done = ((value != 0) | (count >= max_iters)).to(tl.int32)
    if clocked:
        c1 = _clock64()
        t1 = _globaltimer()
        tl.store(stamp_ptr + slot * 2, c1 - c0)
        tl.store(stamp_ptr + slot * 2 + 1, t1 - t0)
    tl.store(count_ptr + slot, count)


@triton.jit
def read_flush(src_ptr, out_ptr, n, block: tl.constexpr):
    """Read ``n`` floats (evicting L2 without dirtying it); one tiny store per program."""
    pid = tl.program_id(0)
    offsets = pid * block + tl.arange(0, block)
    values = tl.load(src_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr + pid, tl.max(values, axis=0))


@triton.jit
def discard_lines(src_ptr, block: tl.constexpr):
    """``discard.global.L2`` (sm_80+) on ``block`` consecutive 128-byte lines per program of a
    float32 buffer: the lines become invalid without a write-back (their contents undefined)."""
    pid = tl.program_id(0)
    lines = pid * block + tl.arange(0, block)
    ptrs = src_ptr + lines.to(tl.int64) * 32
    tl.inline_asm_elementwise(
        "discard.global.L2 [$1], 128;\n mov.u32 $0, 0;",
        "=r,l",
        [ptrs],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )
