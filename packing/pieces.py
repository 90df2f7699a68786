"""The DeepSeek-V3 tokenizer's encoding with its pre-tokenizer compiled and its pieces' token ids cached.

The tokenizer splits a text into pieces with three Oniguruma regexes and runs byte-level BPE on each piece
alone, so a piece has the same ids wherever it occurs: words recur, and most of a text's pieces were seen
before. `PieceEncoder` splits the text in compiled code (packing/_pieces.c, which states the splits as a
scanner), takes each piece's ids from a dict, and runs the BPE of a piece not yet seen in C too; a piece
too long for it goes to the Hugging Face BPE (a copy of the tokenizer whose pre-tokenizer only maps bytes).
The Hugging Face tokenizer is the oracle: tests/test_pieces.py checks that both give the same ids on random
and real texts. Texts that hold one of the tokenizer's added tokens (which it matches before splitting) and
texts with a lone surrogate go to the Hugging Face tokenizer whole, as does everything where the extension
was not built.

The scanner's character classes (packing/pieces_classes.txt) are measured from the tokenizer: for each
code point, which class its regexes give it (`python -m packing.pieces_classes`, a few minutes,
rewrites the file), so they follow the Unicode version of the tokenizer's Oniguruma, not Python's.
"""

from __future__ import annotations

import json
import os

import numpy as np

# The pre-tokenizer the scanner implements (DeepSeek-V3's tokenizer.json); any other gets no fast path.
PRE_TOKENIZER = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                                           "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
                                           "\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
CLASSES_FILE = os.path.join(os.path.dirname(__file__), "pieces_classes.txt")
OTHER, LETTER, NUMBER, PUNCT, SPACE = range(5)  # packing/_pieces.c's classes
CACHE_ENTRIES = 1 << 18  # the cache starts over before a batch once it holds more pieces than this (~35 MB)


def load_classes(path: str = CLASSES_FILE) -> bytes:
    """One class byte per code point from the file's runs (`start_hex class` lines, each class holding up to
    the next start)."""
    table = bytearray(0x110000)
    runs = []
    with open(path, encoding="ascii") as fh:
        for line in fh:
            if line.strip() and not line.startswith("#"):
                start, cls = line.split()
                runs.append((int(start, 16), int(cls)))
    for (start, cls), (end, _) in zip(runs, runs[1:] + [(0x110000, 0)]):
        table[start:end] = bytes((cls,)) * (end - start)
    return bytes(table)


def byte_chars() -> list[str]:
    """The character byte-level BPE writes each byte as (GPT-2's `bytes_to_unicode`): printable Latin-1 as
    itself, every other byte as U+0100 onwards in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(others)) for b in range(256)]


def bpe_table(model: dict, compiled):
    """packing/_pieces.c's table of the BPE `model` (a tokenizer.json's), or None where the model asks for
    what it does not do (a subword prefix or suffix, byte fallback, merges skipped for whole words, a byte
    without a token): its pieces then go to the Hugging Face BPE."""
    if (model.get("continuing_subword_prefix") or model.get("end_of_word_suffix") or model.get("byte_fallback")
            or model.get("ignore_merges") or model.get("dropout")):
        return None
    vocab, merges = model["vocab"], model["merges"]
    if all(isinstance(merge, str) for merge in merges):  # "left right": a token holds no space in this format
        parts = " ".join(merges).split(" ")
        lefts, rights = parts[0::2], parts[1::2]
        if len(parts) != 2 * len(merges):
            return None
    else:
        lefts, rights = [left for left, _ in merges], [right for _, right in merges]
    try:
        byte_ids = [vocab[c] for c in byte_chars()]
        ids = [np.fromiter(map(vocab.__getitem__, tokens), dtype="<u4", count=len(merges)).tobytes()
               for tokens in (lefts, rights, map(str.__add__, lefts, rights))]
    except KeyError:  # a byte or a merge without its token
        return None
    return compiled.bpe(*ids, np.array(byte_ids, dtype="<u4").tobytes())


def token_lengths(vocab: dict) -> bytes | None:
    """Each token id's length in bytes (uint16), for the offsets: 0 for a token not made of byte characters
    (a special token in the vocabulary, which no merge makes); None where a token is too long for it."""
    alphabet = set(byte_chars())
    if max(map(len, vocab), default=0) >= 1 << 16:
        return None
    lengths = np.zeros(max(vocab.values(), default=-1) + 1, dtype="<u2")
    for token, token_id in vocab.items():
        lengths[token_id] = len(token) if alphabet.issuperset(token) else 0
    return lengths.tobytes()


class PieceEncoder:
    """Token ids of texts as `tokenizers.Tokenizer.encode(text, add_special_tokens=False).ids` gives them, for
    a tokenizer.json with DeepSeek-V3's normalizer-free pre-tokenizer and a BPE model; `PieceEncoder.of`
    returns None for any other."""

    def __init__(self, config: dict, compiled, tok=None):
        from tokenizers import Tokenizer

        self.tok = tok if tok is not None else Tokenizer.from_str(json.dumps(config))
        self._pieces_tok = None  # the Hugging Face BPE alone, loaded when a piece first needs it
        self.compiled = compiled
        self.classes = load_classes()
        self.cache: dict[str, bytes] = {}
        self.bpe = bpe_table(config["model"], compiled)
        self.lengths = token_lengths(config["model"]["vocab"])
        self.added: dict[str, tuple[str, ...]] = {}  # the added tokens by their first two characters
        for added in config.get("added_tokens", []):
            self.added.setdefault(added["content"][:2], ())
            self.added[added["content"][:2]] += (added["content"],)
        self.added_firsts = "".join(sorted({start[0] for start in self.added}))

    @classmethod
    def of(cls, config: dict, tok=None) -> "PieceEncoder | None":
        """The encoder for a tokenizer.json's `config` (and its loaded `tokenizers.Tokenizer`, when there is one),
        or None."""
        try:
            from packing import _pieces  # built by `pip install` (setup.py) where a C compiler is
        except ImportError:
            return None
        normalizer = config.get("normalizer")
        plain = normalizer is None or normalizer == {"type": "Sequence", "normalizers": []}
        model = config.get("model", {})
        if not (plain and config.get("pre_tokenizer") == PRE_TOKENIZER and model.get("type") == "BPE"
                and not model.get("dropout") and all(len(a["content"]) >= 2 for a in config.get("added_tokens", []))):
            return None
        return cls(config, _pieces, tok)

    def _holds_added_token(self, text: str) -> bool:
        """Whether one of the tokenizer's added tokens occurs in text (looked for where their first character
        does)."""
        for first in self.added_firsts:
            at = text.find(first)
            while at >= 0:
                if text.startswith(self.added.get(text[at:at + 2], ()), at):
                    return True
                at = text.find(first, at + 1)
        return False

    def _learn(self, missing: list[str]) -> None:
        """The ids of pieces from the Hugging Face BPE (a copy of the tokenizer whose pre-tokenizer only maps
        bytes), into the cache."""
        if self._pieces_tok is None:
            from tokenizers import Tokenizer, pre_tokenizers

            self._pieces_tok = Tokenizer.from_str(self.tok.to_str())
            self._pieces_tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        if len(self.cache) + len(missing) > CACHE_ENTRIES:
            self.cache.clear()
        unseen = list(dict.fromkeys(missing))
        for piece, enc in zip(unseen, self._pieces_tok.encode_batch_fast(unseen, add_special_tokens=False)):
            self.cache[piece] = np.array(enc.ids, dtype="<u4").tobytes()

    def text_offsets(self, text: str) -> list[tuple[int, int]] | None:
        """The character span of each token of text, as `tokenizers.Encoding.offsets` gives them; None where
        the Hugging Face tokenizer has to give them (a text it encodes whole, a vocabulary not all bytes)."""
        if self.lengths is None or self._holds_added_token(text):
            return None
        if len(self.cache) > CACHE_ENTRIES:
            self.cache.clear()
        found = self.compiled.encode(text, self.cache, self.classes, self.bpe, self.lengths)
        for _ in range(2):
            if type(found) is not list:
                break
            self._learn(found)
            found = self.compiled.encode(text, self.cache, self.classes, self.bpe, self.lengths)
        if type(found) is not tuple:
            return None
        spans = np.frombuffer(found[1], dtype="<i8")
        return list(zip(spans[0::2].tolist(), spans[1::2].tolist()))

    def encode_texts(self, texts: list[str]) -> list[np.ndarray]:
        """The token ids of each text (no special tokens added), as uint32 arrays."""
        if len(self.cache) > CACHE_ENTRIES:
            self.cache.clear()
        encode = self.compiled.encode
        found = [None if self._holds_added_token(text) else encode(text, self.cache, self.classes, self.bpe)
                 for text in texts]
        for _ in range(2):  # the pieces of the whole batch met for the first time, to the BPE at once; twice:
            missing = [i for i, ids in enumerate(found) if type(ids) is list]  # learning may start the cache over
            if not missing:
                break
            self._learn([piece for i in missing for piece in found[i]])
            for i in missing:
                found[i] = encode(texts[i], self.cache, self.classes, self.bpe)
        whole = [i for i, ids in enumerate(found) if type(ids) is not bytes]  # or more pieces than the cache holds
        if whole:
            for i, enc in zip(whole, self.tok.encode_batch_fast([texts[i] for i in whole], add_special_tokens=False)):
                found[i] = enc.ids
        return [np.frombuffer(ids, dtype="<u4") if type(ids) is bytes else np.array(ids, dtype="<u4")
                for ids in found]
