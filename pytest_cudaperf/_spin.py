"""Triton kernels of the CUDA backend: the spin that blocks a stream until the host releases a
pinned flag, and a read-only L2 flush with small launch parameters.

Imported only on CUDA machines that have Triton; :mod:`pytest_cudaperf.cuda_timing` falls back to
``torch.cuda._sleep`` without it.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["slot", "max_iters"])
def spin_until_released(flag_ptr, count_ptr, slot, max_iters):
    """Spin until the host sets ``flag[slot]`` (or ``max_iters`` reads); record the reads."""
    done = 0
    count = 0
    while done == 0:
        value = tl.load(flag_ptr + slot, volatile=True)
        count += 1
        done = ((value != 0) | (count >= max_iters)).to(tl.int32)
    tl.store(count_ptr + slot, count)


@triton.jit
def read_flush(src_ptr, out_ptr, n, block: tl.constexpr):
    """Read ``n`` floats (evicting L2 without dirtying it); one tiny store per program."""
    pid = tl.program_id(0)
    offsets = pid * block + tl.arange(0, block)
    values = tl.load(src_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr + pid, tl.max(values, axis=0))
