"""Kernel-level (CUDA) or op-level (CPU) breakdown of a callable, and the diff that says *what*
changed when a measurement regressed.

``profile(fn, device)`` runs ``fn`` under ``torch.profiler``: a few warm-up calls (timed on the host
clock), then ``calls`` calls profiled, averaged per call.

* **CUDA**: every device activity the profiler reports for that device counts as a kernel:
  kernels, memory copies (``Memcpy HtoD ...``) and memsets. Per kernel: a readable short name,
  launches per call and device time per call. Host side: the top-level aten ops by host
  (CPU-inclusive) time, so that a host-time regression can name the ops that grew.
* **CPU**: the *top-level* ops: an op (a name with ``::``, e.g. ``aten::linear``,
  ``autograd::engine::evaluate_function: MmBackward0``) none of whose ancestors is an op.
  Its time is its CPU-inclusive time (children included, and the children are not listed), so
  no time is counted twice; user annotations (``record_function``) are transparent.

The entries that cover >= 95% of the total time are kept (at most ``MAX_ENTRIES``), the rest are
summed as ``(other N kernels)``. Every float is rounded to 6 significant digits when the breakdown
is built, so ``from_json(to_json(b)) == b`` and the stored JSON is deterministic.

CUDA graphs: a replayed graph's kernels are listed when the profiler (CUPTI) sees inside the
graph; when graph launches were seen but no kernel, the breakdown says
``graph replay: kernels not visible``.

torch is imported inside ``profile`` only.
"""
