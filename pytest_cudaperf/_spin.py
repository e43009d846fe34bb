"""The Triton spin kernel that blocks a stream until the host releases a pinned flag.

Imported only on CUDA machines that have Triton; :mod:`pytest_cudaperf.cuda_timing` falls back to
``torch.cuda._sleep`` without it.
"""

import triton
import triton.language as tl


@triton.jit
def spin_until_released(flag_ptr, count_ptr, max_iters):  # type: ignore[no-untyped-def]
    done = 0
    count = 0
    while done == 0:
        value = tl.load(flag_ptr, volatile=True)
        count += 1
        done = ((value != 0) | (count >= max_iters)).to(tl.int32)
    tl.store(count_ptr, count)
