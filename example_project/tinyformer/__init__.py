"""tinyformer: a transformer block with an eager and a fused attention path."""

from tinyformer.loader import BatchLoader
from tinyformer.model import Attention, TransformerBlock, train_step
from tinyformer.ops import rms_norm

__all__ = ["Attention", "BatchLoader", "TransformerBlock", "rms_norm", "train_step"]
