"""Visual tokens an image costs the trainer, under a vision policy (the DeepSeek-V4.1 report's
autoregressive-stage resolution): sides brought into [min_side, max_side] keeping the aspect ratio,
snapped to multiples of patch x merge, then one token per merge x merge block of patches.

With patch 14 and a 2 x 2 spatial merge a token covers 28 x 28 pixels, so tokens = (H / 28) * (W / 28)
after snapping: a 1344 x 1344 image costs 48 * 48 = 2,304 tokens, the 544-px minimum side about 20.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VisionPolicy:
    patch: int = 14
    min_side: int = 544
    max_side: int = 1344
    merge: int = 2


def fitted_size(width: int, height: int, policy: VisionPolicy = VisionPolicy()) -> tuple[int, int]:
    """(width, height) the image is resized to: scaled so that the shorter side reaches min_side and
    the longer side stays within max_side (for an aspect beyond max/min the longer side wins: the
    sequence length is what is bounded), each side then rounded to a multiple of patch * merge."""
    if width <= 0 or height <= 0:
        raise ValueError(f"image size {width}x{height}")
    scale = 1.0
    if min(width, height) < policy.min_side:
        scale = policy.min_side / min(width, height)
    if max(width, height) * scale > policy.max_side:
        scale = policy.max_side / max(width, height)
    unit = policy.patch * policy.merge
    return tuple(max(unit, round(side * scale / unit) * unit) for side in (width, height))


def visual_tokens(width: int, height: int, policy: VisionPolicy = VisionPolicy()) -> int:
    w, h = fitted_size(width, height, policy)
    unit = policy.patch * policy.merge
    return (w // unit) * (h // unit)
