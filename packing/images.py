"""The trainer's view of a run's image stores: pixels of an image by its sha256, at the size the packer
gave its visual-token block.

A run keeps each image once, content-addressed, in OUT/images/interleaved/part-*.parquet (images of
interleaved documents) and OUT/images/pairs/part-*.parquet (image-text pairs), schema
pipelines.image_pairs.IMAGE_SCHEMA: id (= sha256), sha256, bytes (the image as fetched), width, height
(original, after EXIF orientation), format, frames, phash. The shards (packing/shards.py) name an image
by sha256 and give the resized height x width of its span (multiples of 28: patch 14 x the 2x2 merge).

`ImageStore(source)` indexes sha256 -> (file, row group, row) from the sha256 column alone, so opening
a store reads no image bytes; `pixels(sha256, height, width)` reads the bytes column of the image's
row group (the last one read stays cached, so images of one row group in a row cost one read),
decodes the bytes with the pipeline's own defensive decoder (filters.image.open_image: Pillow's
decompression-bomb limit, first frame of an animation, EXIF orientation, palette/CMYK/16-bit/alpha
to RGB on white — the same image whose size the packer sized the span from) and resizes it to
width x height with bicubic filtering, always the same filter so that an image gives the same
pixels in every step and every run. Decoded, resized images are kept
in a small LRU cache bounded by bytes: a phase is read epoch after epoch and the held-out set at
every evaluation.

No Beam and no torch here: the store is plain Pillow + pyarrow, usable from a DataLoader worker.
"""

from __future__ import annotations

import glob
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from filters.image import DecodeRules, ImageRejected, open_image

__all__ = ["ImageStore", "STORE_FOLDERS", "find_store_folders"]

STORE_FOLDERS = ("interleaved", "pairs")  # under OUT/images/
CACHE_BYTES = 256 << 20  # decoded images kept: ~45 images at the 1344 x 1344 maximum, thousands of small ones


def _decode_rules() -> DecodeRules:
    """filters.image.open_image rules that decode any stored image: the size rules were applied when
    the image entered the store, so none here, but Pillow's bomb limit and the format allow-list stay."""
    return DecodeRules(min_side=0, max_aspect=float("inf"), max_pixels=Image.MAX_IMAGE_PIXELS,
                       max_image_bytes=1 << 62)


def _images_folders(folder: str) -> list[str]:
    """Where the OUT/images folder of `folder` can be: itself when it is named images, else under it or
    one or two levels up (a run, its shards folder, one of its phase folders)."""
    if os.path.basename(folder) == "images":
        return [folder]
    return [os.path.join(run, "images") for run in (folder, os.path.dirname(folder),
                                                    os.path.dirname(os.path.dirname(folder)))]


def find_store_folders(source: str | os.PathLike) -> list[str]:
    """The image-store folders for `source`: a folder holding part-*.parquet itself; OUT/images; or a run
    folder, a shards folder (OUT/shards) or a phase folder (OUT/shards/<phase>), whose run is at most two
    levels up. [] when there is none. (A run folder's own interleaved/ is a stage's documents, not images:
    stores are only looked for under a folder named images.)"""
    folder = os.path.abspath(os.fspath(source))
    if glob.glob(os.path.join(folder, "part-*.parquet")):
        return [folder]
    for images in _images_folders(folder):
        found = [os.path.join(images, name) for name in STORE_FOLDERS
                 if glob.glob(os.path.join(images, name, "part-*.parquet"))]
        if found:
            return found
    return []


class ImageStore:
    """sha256 -> pixels over a run's Parquet image stores (see the module docstring).

    `source`: a run, shards, phase or images folder (find_store_folders), or a list of store folders
    (each holding part-*.parquet). FileNotFoundError when no store file is found. An image present in
    several stores (the same bytes, as the stores are content-addressed) is read from the first."""

    def __init__(self, source: str | os.PathLike | Sequence[str | os.PathLike],
                 cache_bytes: int = CACHE_BYTES) -> None:
        if isinstance(source, (str, os.PathLike)):
            self.folders = find_store_folders(source)
            looked = [os.path.join(images, f"{{{','.join(STORE_FOLDERS)}}}")
                      for images in _images_folders(os.path.abspath(os.fspath(source)))]
        else:
            self.folders = looked = [os.path.abspath(os.fspath(f)) for f in source]
        self.files = sorted(f for folder in self.folders for f in glob.glob(os.path.join(folder, "part-*.parquet")))
        if not self.files:
            raise FileNotFoundError(f"no image store (part-*.parquet) in {', '.join(looked)}")
        self.index: dict[str, tuple[int, int, int]] = {}
        for f, path in enumerate(self.files):
            parquet = pq.ParquetFile(path)
            if not {"sha256", "bytes"} <= set(parquet.schema_arrow.names):
                raise FileNotFoundError(f"{path} is not an image store file (no sha256 and bytes columns)")
            for group in range(parquet.num_row_groups):
                digests = parquet.read_row_group(group, columns=["sha256"]).column("sha256").to_pylist()
                for row, digest in enumerate(digests):
                    self.index.setdefault(digest, (f, group, row))
        self._group_key: tuple[int, int] | None = None
        self._group = None
        self._cache: OrderedDict[tuple[str, int, int], np.ndarray] = OrderedDict()
        self._cache_bytes, self._cache_limit = 0, cache_bytes

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, sha256: str) -> bool:
        return sha256 in self.index

    def missing(self, digests: Iterable[str]) -> list[str]:
        """The digests not in the store, sorted."""
        return sorted(d for d in set(digests) if d not in self.index)

    def encoded(self, sha256: str) -> bytes:
        """The image's stored bytes; KeyError naming the digest when the store lacks it."""
        if sha256 not in self.index:
            raise KeyError(f"image {sha256} is not in the image store ({', '.join(self.folders)})")
        f, group, row = self.index[sha256]
        if self._group_key != (f, group):
            self._group = pq.ParquetFile(self.files[f]).read_row_group(group, columns=["bytes"]).column("bytes")
            self._group_key = (f, group)
        return self._group[row].as_py()

    def pixels(self, sha256: str, height: int, width: int) -> np.ndarray:
        """The image as uint8 (height, width, 3) RGB, resized with bicubic filtering; read-only (cached).

        KeyError naming the digest when the store lacks it; ValueError when its bytes do not decode."""
        key = (sha256, int(height), int(width))
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        try:
            rgb, _ = open_image(self.encoded(sha256), _decode_rules())
        except ImageRejected as err:
            raise ValueError(f"image {sha256} in the store does not decode: {err}") from None
        if rgb.size != (key[2], key[1]):
            rgb = rgb.resize((key[2], key[1]), Image.Resampling.BICUBIC)
        array = np.asarray(rgb, dtype=np.uint8).copy()
        array.flags.writeable = False
        self._cache[key] = array
        self._cache_bytes += array.nbytes
        while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= old.nbytes
        return array
