"""Host-bound, synchronising GPU tests: kornia's own augmentation benchmarks
(kornia/benchmarks/augmentation/2d_geometric_test.py and 2d_intensity_test.py at b4f5a78, the
constructor arguments as written there), timed with cuda_timer on 5x3x128x128 float32 batches.
Each call samples its parameters on the host; most synchronise inside."""

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
    "fisheye": "RandomFisheye(cx, cy, gamma, p=1.0)",
    "perspective": "RandomPerspective(0.5, p=1.0)",
    "resized_crop": "RandomResizedCrop((64, 64), p=1.0)",
    "rotation": "RandomRotation(45, p=1.0)",
    "shear": "RandomShear((-5.0, 2.0, 5.0, 10.0), p=1.0)",
    "thin_plate_spline": "RandomThinPlateSpline(p=1.0)",
    "translate": "RandomTranslate((-0.2, 0.2), (-0.1, 0.1), p=1.0)",
    "color_jiggle": "ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0)",
    "color_jitter": "ColorJitter(0.1, 0.1, 0.1, 0.1, p=1.0)",
    "auto_contrast": "RandomAutoContrast(p=1.0)",
    "box_blur": "RandomBoxBlur(p=1.0)",
    "brightness": "RandomBrightness((0.1, 1), p=1.0)",
    "channel_dropout": "RandomChannelDropout(p=1.0)",
    "channel_shuffle": "RandomChannelShuffle(p=1.0)",
    "clahe": "RandomClahe((10, 40), p=1.0)",
    "contrast": "RandomContrast((0.1, 1), p=1.0)",
    "equalize": "RandomEqualize(p=1.0)",
    "gamma": "RandomGamma((0.0, 1.0), (0.0, 1.0), p=1.0)",
    "gaussian_blur": "RandomGaussianBlur(3, (1.6, 1.7), p=1.0)",
    "gaussian_illumination": "RandomGaussianIllumination(p=1.0)",
    "gaussian_noise": "RandomGaussianNoise(0.0, 1.0, p=1.0)",
    "grayscale": "RandomGrayscale(p=1.0)",
    "hue": "RandomHue((0.0, 0.5), p=1.0)",
    "linear_corner_illumination": "RandomLinearCornerIllumination(p=1.0)",
    "linear_illumination": "RandomLinearIllumination(p=1.0)",
    "median_blur": "RandomMedianBlur(p=1.0)",
    "planckian_jitter": "RandomPlanckianJitter(p=1.0)",
    "plasma_brightness": "RandomPlasmaBrightness(p=1.0)",
    "plasma_shadow": "RandomPlasmaShadow(p=1.0)",
    "posterize": "RandomPosterize(p=1.0)",
    "rain": "RandomRain(p=1.0)",
    "rgb_shift": "RandomRGBShift(p=1.0)",
    "salt_and_pepper": "RandomSaltAndPepperNoise(p=1.0)",
    "saturation": "RandomSaturation((0.0, 2.0), p=1.0)",
    "sharpness": "RandomSharpness(p=1.0)",
    "snow": "RandomSnow(p=1.0)",
}


@pytest.mark.perf
@pytest.mark.parametrize("name", sorted(AUGMENTATIONS))
def test_augmentation(name: str, cuda_timer: Any, cuda_device: Any) -> None:
    data = torch.rand(5, 3, 128, 128, device=cuda_device)
    # kornia's fisheye benchmark builds its parameters as tensors on the device
    cx = torch.tensor([-0.3, 0.3], device=cuda_device)
    cy = torch.tensor([-0.3, 0.3], device=cuda_device)
    gamma = torch.tensor([0.9, 1.0], device=cuda_device)
    aug = eval(f"K.{AUGMENTATIONS[name]}", {"K": K, "cx": cx, "cy": cy, "gamma": gamma})
    assert aug(data).shape[:2] == data.shape[:2]
    cuda_timer(aug, data)
