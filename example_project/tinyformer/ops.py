"""A custom operator registered with torch.library (RMSNorm), with a reference implementation."""

from __future__ import annotations

import torch


@torch.library.custom_op("tinyformer::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x.float() * scale).to(x.dtype) * weight


@rms_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.empty_like(x)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * weight


def _setup_context(
    ctx: torch.autograd.function.FunctionCtx, inputs: tuple[object, ...], output: torch.Tensor
) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps  # type: ignore[attr-defined]


def _backward(
    ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, None]:
    x, weight = ctx.saved_tensors  # type: ignore[attr-defined]
    with torch.enable_grad():
        x_ = x.detach().requires_grad_()
        w_ = weight.detach().requires_grad_()
        out = rms_norm_reference(x_, w_, ctx.eps)  # type: ignore[attr-defined]
        grad_x, grad_w = torch.autograd.grad(out, (x_, w_), grad)
    return grad_x, grad_w, None


rms_norm.register_autograd(_backward, setup_context=_setup_context)
