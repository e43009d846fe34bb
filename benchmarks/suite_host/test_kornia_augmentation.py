"""Host-heavy augmentations that do not synchronise: kornia's own augmentation benchmarks
(kornia/benchmarks/augmentation/2d_geometric_test.py and 2d_intensity_test.py at b4f5a78, the
constructor arguments as written there), timed with cuda_timer on 5x3x128x128 float32 batches.
Each call samples its parameters on the host for 1-4 ms and queues 10-230 µs of kernels."""

from __future__ import annotations

from typing import Any

import pytest

K = pytest.importorskip("kornia.augmentation")
torch = pytest.importorskip("torch")

AUGMENTATIONS = {
    "affine": "RandomAffine(degrees=45, translate=0.25, scale=(0.9, 1.1), shear=1.25, p=1.0)",
    "crop": "RandomCrop((64, 64), pad_if_needed=True, p=1.0)",
    "elastic": "RandomElasticTransform(p=1.0)",
    "erasing": "RandomErasing(p=1.0)",
    "perspective": "RandomPerspective(0.5, p=1.0)",
    "resized_crop": "RandomResizedCrop((64, 64), p=1.0)",
    "rotation": "RandomRotation(45, p=1.0)",
    "thin_plate_spline": "RandomThinPlateSpline(p=1.0)",
    "equalize": "RandomEqualize(p=1.0)",
    "hue": "RandomHue((0.0, 0.5), p=1.0)",
}


@pytest.mark.perf
@pytest.mark.parametrize("name", sorted(AUGMENTATIONS))
def test_augmentation(name: str, cuda_timer: Any, cuda_device: Any) -> None:
    data = torch.rand(5, 3, 128, 128, device=cuda_device)
    aug = eval(f"K.{AUGMENTATIONS[name]}", {"K": K})
    assert aug(data).shape[:2] == data.shape[:2]
    cuda_timer(aug, data)
