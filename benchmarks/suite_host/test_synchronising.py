"""Host-bound GPU code that synchronises inside, from public code: kornia 0.9.0's augmentations
whose parameters are read back (``.item()``), its auto-augment policies, feature detection
(SIFT, a scale-space detector) and RANSAC with Python control flow, and PyTorch ops whose output
size depends on the data (``nonzero``, ``unique``, boolean indexing...), which wait for the GPU
before they return. Small batches, as a data pipeline or a post-processing step has them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

kornia = pytest.importorskip("kornia")
torch = pytest.importorskip("torch")

import kornia.augmentation as K  # noqa: E402, N812 - kornia's own spelling
import kornia.feature as KF  # noqa: E402, N812
from kornia.geometry.ransac import RANSAC  # noqa: E402

BATCH = (5, 3, 128, 128)

#: name -> (batch shape, augmentation): the constructor arguments of kornia's own benchmarks
#: where they have one
AUGMENTATIONS: dict[str, tuple[tuple[int, ...], Callable[[], Any]]] = {
    "color_jiggle": (BATCH, lambda: K.ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0)),
    "color_jitter": (BATCH, lambda: K.ColorJitter(0.1, 0.1, 0.1, 0.1, p=1.0)),
    "gaussian_blur": (BATCH, lambda: K.RandomGaussianBlur(3, (1.6, 1.7), p=1.0)),
    "rain": (BATCH, lambda: K.RandomRain(p=1.0)),
    "jigsaw": (BATCH, lambda: K.RandomJigsaw((4, 4), p=1.0)),
    "mosaic": (BATCH, lambda: K.RandomMosaic((64, 64), p=1.0)),
    "cutmix": (BATCH, lambda: K.RandomCutMixV2(p=1.0)),
    "mixup": (BATCH, lambda: K.RandomMixUpV2(p=1.0)),
    "jpeg": (BATCH, lambda: K.RandomJPEG(p=1.0)),
    "rand_augment": (BATCH, lambda: K.auto.RandAugment(n=2, m=10)),
    "trivial_augment": (BATCH, K.auto.TrivialAugment),
    "auto_augment": (BATCH, K.auto.AutoAugment),
    "video": (
        (2, 4, 3, 64, 64),
        lambda: K.VideoSequential(
            K.ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0),
            K.RandomAffine(30, p=1.0),
            data_format="BTCHW",
        ),
    ),
}


@pytest.mark.perf
@pytest.mark.parametrize("name", sorted(AUGMENTATIONS))
def test_augmentation(name: str, cuda_timer: Any, cuda_device: Any) -> None:
    shape, make = AUGMENTATIONS[name]
    data = torch.rand(*shape, device=cuda_device)
    aug = make().to(cuda_device)
    assert aug(data).shape[0] == shape[0]
    cuda_timer(aug, data)


@pytest.mark.perf
@pytest.mark.parametrize("model", ["sift", "scale_space"])
def test_feature_detection(model: str, cuda_timer: Any, cuda_device: Any) -> None:
    image = torch.rand(1, 1, 128, 128, device=cuda_device)
    make = KF.SIFTFeature if model == "sift" else KF.ScaleSpaceDetector
    detector = make(num_features=128).to(cuda_device)
    detector(image)
    cuda_timer(detector, image)


@pytest.mark.perf
@pytest.mark.parametrize("model", ["homography", "fundamental"])
def test_ransac(model: str, cuda_timer: Any, cuda_device: Any) -> None:
    gen = torch.Generator().manual_seed(0)
    src = torch.rand(100, 2, generator=gen) * 100
    dst = src + torch.randn(100, 2, generator=gen)
    ransac = RANSAC(model, max_iter=10)
    src, dst = src.to(cuda_device), dst.to(cuda_device)
    ransac(src, dst)
    cuda_timer(ransac, src, dst)


@pytest.mark.perf
def test_canny(cuda_timer: Any, cuda_device: Any) -> None:
    image = torch.rand(2, 3, 128, 128, device=cuda_device)
    cuda_timer(kornia.filters.canny, image)


#: name -> (op, input maker): data-dependent output sizes, at two sizes where it matters
OPS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "nonzero_64k": (torch.nonzero, lambda d: torch.rand(1 << 16, device=d) > 0.5),
    "nonzero_4m": (torch.nonzero, lambda d: torch.rand(1 << 22, device=d) > 0.5),
    "argwhere": (torch.argwhere, lambda d: torch.rand(256, 256, device=d) > 0.9),
    "unique_64k": (torch.unique, lambda d: torch.randint(0, 1000, (1 << 16,), device=d)),
    "unique_4m": (torch.unique, lambda d: torch.randint(0, 1000, (1 << 22,), device=d)),
    "unique_counts": (
        lambda x: torch.unique(x, return_counts=True),
        lambda d: torch.randint(0, 100, (1 << 16,), device=d),
    ),
    "unique_consecutive": (
        torch.unique_consecutive,
        lambda d: torch.randint(0, 4, (1 << 16,), device=d).sort().values,
    ),
    "bincount": (torch.bincount, lambda d: torch.randint(0, 1000, (1 << 18,), device=d)),
    "masked_select": (
        lambda x: torch.masked_select(x, x > 0.5),
        lambda d: torch.rand(1 << 18, device=d),
    ),
    "boolean_index": (lambda x: x[x[:, 0] > 0.5], lambda d: torch.rand(1 << 14, 16, device=d)),
    "repeat_interleave": (
        torch.repeat_interleave,
        lambda d: torch.randint(0, 5, (1 << 14,), device=d),
    ),
    "where_one_argument": (torch.where, lambda d: torch.rand(1 << 18, device=d) > 0.5),
    "tolist": (lambda x: x.tolist(), lambda d: torch.rand(1024, device=d)),
    "item_of_sum": (lambda x: x.sum().item(), lambda d: torch.rand(1 << 20, device=d)),
    "topk_then_nonzero": (
        lambda x: torch.nonzero(x.topk(1024).values > 0.99),
        lambda d: torch.rand(1 << 20, device=d),
    ),
}


@pytest.mark.perf
@pytest.mark.parametrize("name", sorted(OPS))
def test_data_dependent_op(name: str, cuda_timer: Any, cuda_device: Any) -> None:
    op, make = OPS[name]
    x = make(cuda_device)
    op(x)
    cuda_timer(op, x)
