"""The DeepSeek-V3 tokenizer's compiled pre-tokenizer and BPE with cached piece ids (packing/pieces.py,
packing/_pieces.c) against the Hugging Face tokenizer, their oracle: the same token ids on real pages' text
in several languages, on random texts mixing every class the regexes tell apart, on code points sampled
from all of Unicode, and on texts holding added tokens; the same token offsets; its class table against the
tokenizer's regexes."""

import json
import random

import numpy as np
import pytest

from packing import pieces
from packing.pieces_classes import measure_classes
from packing.tokenizer import DEFAULT_TOKENIZER, DocTokenizer, resolve_tokenizer_file
from tests.test_words_compiled import real_texts

# Each class of packing/_pieces.c and the characters its scanner treats apart: ASCII and other letters,
# marks, Han and Kana (with the Kana block's punctuation and symbol), numbers of several kinds, ASCII and other
# punctuation and symbols, ' ', \r, \n, other whitespace, and characters of no class (controls, format).
POOL = ("aZqéßЖकि" "\u0301\u093f" "一龥字ひカー・゠゛〇々\U00020000" "09٣０²½Ⅻ" "'.-,!?$+<|~_" "…—«€•™！"
        "  \r\n\n\t" "\u00a0\u2003\u3000\u0085\u2028" "\x00\x07\u200b\u200d\ufeff" "\U0001f600")


@pytest.fixture(scope="module")
def tok():
    encoder = DocTokenizer(DEFAULT_TOKENIZER)
    assert encoder.pieces is not None, "packing._pieces is not built (pip install -e . builds it)"
    return encoder


def oracle(tok, texts):
    return [enc.ids for enc in tok.tok.encode_batch(texts, add_special_tokens=False)]


def assert_same(tok, texts):
    got = tok.pieces.encode_texts(texts)
    for text, ids, want in zip(texts, got, oracle(tok, texts)):
        assert ids.tolist() == want, repr(text[:200])


def test_real_pages_give_the_tokenizer_s_ids(tok):
    texts = real_texts()
    assert len(texts) > 100
    assert_same(tok, texts)
    assert_same(tok, texts)  # again, every piece from the cache


def test_random_texts_give_the_tokenizer_s_ids(tok):
    rng = random.Random(7)
    texts = ["".join(rng.choice(POOL) for _ in range(rng.randrange(1, 60))) for _ in range(3000)]
    texts += ["".join(chr(rng.choice((rng.randrange(0xD800), rng.randrange(0xE000, 0x110000))))
                      for _ in range(rng.randrange(1, 20))) for _ in range(500)]
    texts += ["", " ", "\n", "1234567", "  \n  x", "x  ", "a \u3000b", "'s", ".Net 3.14", "一二三abc123あア"]
    assert_same(tok, texts)


def test_offsets_are_the_tokenizer_s(tok):
    """Each token's character span, tokens inside a character (emoji, Han, accents split by the BPE) included, on
    the sample's pages and random texts; a text the Hugging Face tokenizer encodes whole gets its offsets."""
    rng = random.Random(11)
    texts = real_texts()[:60] + ["".join(rng.choice(POOL) for _ in range(rng.randrange(1, 80))) for _ in range(1500)]
    texts += ["é" * 9, "a\U0001f600\U0001f600b", "z" * 300 + " y", "x <think> y"]
    for text in texts:
        assert tok.text_offsets(text) == tok.tok.encode(text, add_special_tokens=False).offsets, repr(text[:100])
    assert tok.pieces.text_offsets("x <think> y") is None
    assert tok.pieces.text_offsets("é" * 9) is not None


def test_added_tokens_and_surrogates_go_to_the_tokenizer(tok):
    texts = ["before <｜end▁of▁sentence｜> after", "<think>a</think>", "x<|EOT|>", "a < b and ｜ alone", "<<｜"]
    assert_same(tok, texts)
    assert tok.pieces.compiled.encode("a\ud800b", {}, tok.pieces.classes) is None


def test_the_cache_starts_over_when_full(tok, monkeypatch):
    encoder = pieces.PieceEncoder.of(json.loads(open(resolve_tokenizer_file(DEFAULT_TOKENIZER), "rb").read()))
    monkeypatch.setattr(pieces, "CACHE_ENTRIES", 8)
    texts = ["one two three four five six seven", "eight nine ten eleven twelve", "one two three"]
    for text, want in zip(texts, oracle(tok, texts)):
        assert encoder.encode_texts([text])[0].tolist() == want
        assert len(encoder.cache) <= 8 + len(text.split())
    assert [ids.tolist() for ids in encoder.encode_texts(texts)] == oracle(tok, texts)


def test_pieces_the_compiled_bpe_leaves_go_to_the_tokenizer_s(tok):
    """A piece longer than the compiled BPE takes, and every piece where the BPE's table is not built (a model
    it does not do), have their ids from the Hugging Face BPE."""
    encoder = pieces.PieceEncoder.of(json.loads(open(resolve_tokenizer_file(DEFAULT_TOKENIZER), "rb").read()))
    rng = random.Random(3)
    texts = ["".join(rng.choice("abcdefghij") for _ in range(400)) + " word", "a " + "z" * 129 + " é" * 70]
    assert [ids.tolist() for ids in encoder.encode_texts(texts)] == oracle(tok, texts)
    assert any(len(piece) > 128 for piece in encoder.cache)
    encoder.bpe, encoder.cache = None, {}
    texts = real_texts()[:50] + texts
    assert [ids.tolist() for ids in encoder.encode_texts(texts)] == oracle(tok, texts)
    config = json.loads(open(resolve_tokenizer_file(DEFAULT_TOKENIZER), "rb").read())
    assert pieces.bpe_table(dict(config["model"], byte_fallback=True), encoder.compiled) is None


def test_only_deepseek_v3_s_pre_tokenizer_gets_the_fast_path():
    config = json.loads(open(resolve_tokenizer_file(DEFAULT_TOKENIZER), "rb").read())
    assert pieces.PieceEncoder.of(config) is not None
    other = dict(config, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                        "use_regex": True})
    assert pieces.PieceEncoder.of(other) is None
    assert pieces.PieceEncoder.of(dict(config, normalizer={"type": "NFC"})) is None


def test_class_table_is_the_tokenizer_s():
    """Every run's first and last code point and a sample of the rest, measured again from the tokenizer, and
    encoded beside characters of each class."""
    from tokenizers import Tokenizer

    table = pieces.load_classes()
    starts = [cp for cp in range(1, 0x110000) if table[cp] != table[cp - 1]]
    sample = set(starts) | {cp - 1 for cp in starts} | set(range(0, 0x110000, 997))
    sample -= set(range(0xD800, 0xE000))
    measured = measure_classes(resolve_tokenizer_file(DEFAULT_TOKENIZER), sorted(sample))
    assert [measured[cp] for cp in sorted(sample)] == [table[cp] for cp in sorted(sample)]
    config = json.loads(open(resolve_tokenizer_file(DEFAULT_TOKENIZER), "rb").read())
    probe = Tokenizer.from_str(json.dumps(config))
    texts = [chr(cp) for cp in sorted(sample)]
    texts = [f"a{c}!{c}{c} {c}\n1{c}ア{c}・" for c in texts]
    got = pieces.PieceEncoder(config, pytest.importorskip("packing._pieces")).encode_texts(texts)
    want = [enc.ids for enc in probe.encode_batch(texts, add_special_tokens=False)]
    assert [ids.tolist() for ids in got] == want
    assert np.frombuffer(table, dtype=np.uint8).max() == pieces.SPACE
