"""Paragraph rules for interleaved documents (filters/nodes.py, OBELICS's node-level filtering) and the
per-kind document rules of the interleaved_text stage, on oracles and on real pages and a real paper."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from extract.interleaved import linearise
from extract.pdf import parse_pdf
from filters.nodes import NodeRules, char_repetition, continues, filter_text_nodes, judge_paragraph, word_repetition
from filters.quality import tokenize

DATA = Path(__file__).parent / "data"
PAGES = {p["file"]: p for p in json.loads((DATA / "interleaved" / "labels.json").read_text())}
RULES = NodeRules()


@pytest.mark.parametrize("text,reason", [
    ("The glyph used for the consonant r in Malayalam differs by context.", None),
    ("因参加投票的选民人数未达到法律规定的比例，所以选举无效。", None),  # one word per Han character
    ("ما هي أفضل طرق استخدام القوائم المنسدلة المبنية على عنصر select لتوجيه الزائرين إلى المحتوى المترجم؟", None),
    ("Introduction", "node_words"),
    ("- Home", "node_words"),
    ("body { color: red; font-size: 12px; }", "node_special_characters"),
    ("1. | Song title of the album | 3:45 | 4:12 | 2001", "node_special_characters"),
    ("buy cheap shoes online now buy cheap shoes online now buy cheap shoes online now", "node_word_repetition"),
    ("keyword keyword2 keyword3 tag tag2 tag3 thing other more words here now", "node_punctuation"),
])
def test_each_rule_on_what_it_is_for(text, reason):
    assert judge_paragraph(text, RULES) == reason


def _obelics_char_repetition(text: str, n: int) -> float:
    """OBELICS's definition as written there: frequencies sorted, the top min(sqrt(distinct), repeated)."""
    freq = sorted(Counter(text[i:i + n] for i in range(len(text) - n + 1)).values(), reverse=True)
    if not freq:
        return 0
    top = min(int(len(freq) ** 0.5), len(freq) - sum(1 for f in freq if f == 1))
    return sum(freq[:top]) / sum(freq)


def _obelics_word_repetition(words: list[str], n: int) -> float:
    freq = Counter(" ".join(words[i:i + n]) for i in range(len(words) - n + 1)).values()
    return sum(f for f in freq if f > 1) / sum(freq) if freq else 0


def test_repetition_ratios_are_obelics_definitions():
    rng = random.Random(7)
    for _ in range(300):
        alphabet = rng.choice(["ab", "abc ", "the cat sat on the mat ", "xyz"])
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        assert char_repetition(text, 10) == pytest.approx(_obelics_char_repetition(text, 10))
        words = tokenize(text)
        assert word_repetition(words, 5) == pytest.approx(_obelics_word_repetition(words, 5))


def test_compiled_word_repetition_is_its_python_oracle():
    """filters/_words.c's word n-gram table gives word_repetition_python's value exactly: on random word lists
    over small vocabularies (many repeats, hash-slot collisions), several n, and the words of every paragraph of
    the real pages of tests/data/interleaved."""
    from filters import _words
    from filters.nodes import word_repetition_python

    rng = random.Random(13)
    vocab = ["a", "b", "the", "cat", "é", "\u4e00", "x" * 40, "".join(["t", "he"])]  # "the" twice: equal, not the same
    for _ in range(3000):
        words = [rng.choice(vocab[:rng.randint(1, len(vocab))]) for _ in range(rng.randint(0, 80))]
        for n in (1, 2, 3, 5, 9):
            assert _words.word_repetition(words, n) == word_repetition_python(words, n), (words, n)
    paragraphs = [p for name in sorted(PAGES) if name.endswith(".html")
                  for n in _web_doc(name)["nodes"] if n["type"] == "text" for p in n["text"].split("\n")]
    words = [tokenize(p.lower()) for p in paragraphs]
    assert sum(word_repetition_python(w, 5) > 0 for w in words) >= 5  # some repeat
    assert [_words.word_repetition(w, 5) for w in words] == [word_repetition_python(w, 5) for w in words]
    with pytest.raises(TypeError):
        _words.word_repetition(["a", 1, "a"], 1)


def test_special_characters_are_what_is_not_a_letter_or_a_mark():
    """The rule counts runs of a regex, and its compiled twin scans characters; the oracle classifies each
    character (a letter: alphanumeric but not a decimal digit; a mark: a combining mark, ZWNJ or ZWJ; a
    punctuation mark: one of PUNCTUATION)."""
    import unicodedata

    from filters.nodes import PUNCTUATION, paragraph_counts, paragraph_counts_python

    def special(ch):
        letter = ch.isalnum() and not ch.isdecimal()
        mark = unicodedata.category(ch)[0] == "M" or ch in "\u200c\u200d"
        return not (letter or mark)

    rng = random.Random(3)
    alphabet = "aZé ü\t\n0975٣,.;!?-_|{}()<>/\\\"'%$€²½Ⅻनिकोड因参加、。가각🙂\u0301\u200d،؟।"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        expected = (sum(map(special, text)), sum(ch in PUNCTUATION for ch in text))
        assert paragraph_counts_python(text) == expected and paragraph_counts(text) == expected, repr(text)


def test_the_compiled_paragraph_counts_are_the_oracle_s_on_every_code_point():
    """Every BMP code point (lone surrogates too), and astral ones of several kinds, alone: the compiled counts
    are the regexes'."""
    from filters import _words  # noqa: F401  (built by the Makefile: the compiled path is the one under test)
    from filters.nodes import paragraph_counts, paragraph_counts_python

    points = [*range(0x10000), 0x1F642, 0x1D7D8, 0x10140, 0x20000, 0x1D165, 0xE0100, 0x10FFFF]
    assert [paragraph_counts(chr(cp)) for cp in points] == [paragraph_counts_python(chr(cp)) for cp in points]


def test_char_repetition_is_off_by_default_and_available():
    loop = "buy cheap shoes online now " * 3
    assert judge_paragraph("A sentence that says the same: the same thing, the same thing, again and again.", RULES) is None
    strict = NodeRules(max_char_repetition=0.1)
    assert judge_paragraph(loop, strict) == "node_char_repetition"


def test_failing_paragraphs_go_images_and_their_captions_stay():
    nodes = [{"type": "text", "text": "Home\nA paragraph about the figure below, long enough to stay."},
             {"type": "image", "image_url": "https://example.org/a.png", "caption": "A chart", "alt": "chart"},
             {"type": "text", "text": "Menu\nLogin"},
             {"type": "image", "image_url": "https://example.org/b.png", "caption": "", "alt": None}]
    kept, removed = filter_text_nodes(nodes, RULES, by_line=True)
    assert [n["type"] for n in kept] == ["text", "image", "image"]
    assert kept[0]["text"] == "A paragraph about the figure below, long enough to stay."
    assert kept[1] is nodes[1] and kept[2] is nodes[3]
    assert removed == [("node_words", "Home"), ("node_words", "Menu"), ("node_words", "Login")]
    block, removed = filter_text_nodes(nodes, RULES, by_line=False)  # a PDF's block is one paragraph
    assert [n["type"] for n in block] == ["text", "image", "image"] and block[0] is nodes[0]
    assert filter_text_nodes(nodes, NodeRules(enabled=False), True) == (nodes, [])


def test_a_wrapped_line_left_alone_by_a_column_break_stays_with_its_paragraph():
    """Three consecutive text blocks of a real two-column paper (Cohan et al. 2020, SPECTER, ACL
    Anthology 2020.acl-main.207, CC BY 4.0, page 2, as extract/pdf.py cuts them): the middle one is a
    single wrapped line, a run of 12 words without a mark. It fails the punctuation rule alone; it
    carries on its neighbours' sentence, so it stays. A line that does not continue a sentence
    (a page number before it, an upper-case start after it) is judged alone."""
    blocks = ["Document Representation Our goal is to repre-",
              "sent a given paper P as a dense vector v that best",
              "represents the paper and can be used in downstream tasks. SPECTER builds embeddings from the title "
              "and abstract of a paper."]
    nodes = [{"type": "text", "text": t, "page": 2} for t in blocks]
    assert judge_paragraph(blocks[1], RULES) == "node_punctuation"
    assert filter_text_nodes(nodes, RULES, by_line=False) == (nodes, [])
    alone = [nodes[1], {"type": "image", "image_url": "pdf#0", "page": 2}]
    assert filter_text_nodes(alone, RULES, by_line=False)[1] == [("node_punctuation", blocks[1])]
    assert continues(blocks[0], blocks[1]) and continues(blocks[1], blocks[2])
    assert not continues("87", "drug, chemical") and not continues("tasks.", "sent a")
    assert not continues("a paper", "Transformer LM") and not continues("模型", "的")
    # a block that fails another rule is what it is, wherever the layout put it
    equation = {"type": "text", "text": "g!k D LSTM.Wik; g!k1/; gk D Œg!k I gk h!k D LSTM.gk; h!k1/;", "page": 3}
    prose = {"type": "text", "text": "fed into a two-layer bidirectional LSTM (Long Short-Term Memory), i.e.,"}
    assert [r for r, _ in filter_text_nodes([prose, equation], RULES, by_line=False)[1]] == ["node_special_characters"]


def test_pdf_paragraph_rules_keep_citation_dense_prose():
    """A real paper's paragraph (SPECTER, as above, section 7) whose citations make 0.35 of it digits,
    punctuation and spaces: over OBELICS's 0.3 for web paragraphs, under the PDF kind's 0.4, which
    number tables still exceed. `pdf_nodes` takes only keys of `nodes`."""
    from pydantic import ValidationError

    from pipelines.interleaved import InterleavedTextConfig

    cfg = InterleavedTextConfig()
    pdf = NodeRules.model_validate({**cfg.nodes.model_dump(), **cfg.pdf_nodes})
    cited = ("There have been other efforts in document representation learning such as extensions of word vectors "
             "to documents (Le and Mikolov, 2014; Ganesh et al., 2016; Liu et al., 2017; Wu et al., 2018; Gysel et "
             "al., 2017), convolution-based methods (Liu et al., 2018; Zamani et al., 2018), and variational "
             "autoencoders (Holmer and Marfurt, 2018; Wang et al., 2019).")
    table = "Random 4.8 9.4 25.2 51.6 25.6 51.9 25.1 51.5 24.9 51.4 51.3 16.8 32.5 Doc2vec (2014) 66.2 69.2 67.8"
    assert judge_paragraph(cited, cfg.nodes) == "node_special_characters" and judge_paragraph(cited, pdf) is None
    assert judge_paragraph(table, pdf) == "node_special_characters"
    with pytest.raises(ValidationError, match="not keys of the nodes section"):
        InterleavedTextConfig(pdf_nodes={"max_specials": 0.5})


def _screen(doc: dict, **interleaved_text):
    """The interleaved_text stage's step on one document, default settings (or the ones given)."""
    from pipelines.interleaved import InterleavedTextConfig, ScreenText
    from pipelines.registry import STAGES

    cfg = {name: STAGES[name].config() for name in ("language", "quality", "synthetic")}
    cfg["interleaved_text"] = InterleavedTextConfig(**interleaved_text)
    step = ScreenText("interleaved_text", cfg)
    step.setup()
    step.start_bundle()
    return step.step(doc), dict(step._tally)


def _web_doc(name: str) -> dict:
    doc = linearise((DATA / "interleaved" / name).read_text(encoding="utf-8"), PAGES[name]["url"])
    nodes = [{"type": "text", "text": n.text} if n.type == "text" else
             {"type": "image", "image_url": n.image.url, "caption": n.caption, "alt": n.image.alt,
              "position": n.image.position} for n in doc.nodes]
    return {"id": name, "url": PAGES[name]["url"], "kind": "web", "nodes": nodes, "text": doc.text, "scores": {}}


def test_a_w3c_article_with_code_samples_loses_the_code_and_keeps_its_prose():
    """qa-html-dir: its markup samples (`<p dir="auto" class="u1">...`) are removed as paragraphs of
    symbols; the text branch's recipe on the whole text drops the article (FineWeb's duplicate-line
    rule, on the repeated samples)."""
    from pipelines.stage import Drop

    doc = _web_doc("qa-html-dir.html")
    kept, tally = _screen(doc)
    assert not isinstance(kept, Drop)
    assert tally["nodes/removed:web/node_special_characters"] >= 5
    text = kept["text"]
    assert '<p dir="auto" class="u1">' not in text and "<bdi>" not in text
    assert "dir attribute" in text
    images = [n for n in doc["nodes"] if n["type"] == "image"]
    assert [n for n in kept["nodes"] if n["type"] == "image"] == images  # every image, in place
    as_text_branch, _ = _screen(doc, nodes={"enabled": False}, web_quality={})
    assert isinstance(as_text_branch, Drop) and as_text_branch.reason == "fineweb_dup_line_chars"


def test_an_encyclopedia_capture_keeps_its_articles_and_loses_its_navigation():
    """Wikipedia's main page (2012): the navigation and one-word list items go as paragraphs of too
    few words; the featured-article prose stays and the document is kept (FineWeb's short-line rule
    dropped it before)."""
    from pipelines.stage import Drop

    doc = _web_doc("wikipedia-main-page-2012.html")
    kept, tally = _screen(doc)
    assert not isinstance(kept, Drop), kept
    assert tally["nodes/removed:web/node_words"] >= 20
    assert "Upload file" not in kept["text"] and "Nick Drake" in kept["text"]
    before, _ = _screen(doc, nodes={"enabled": False}, web_quality={})
    assert isinstance(before, Drop) and before.reason == "fineweb_short_lines"


def test_an_acl_paper_is_kept_with_its_abstract_first():
    """N18-3011 has braces in its math; C4's curly-bracket rule is off for PDFs, and each text block is
    one paragraph, so its abstract stays in its first text nodes."""
    from pipelines.stage import Drop

    parsed = parse_pdf((DATA / "pdf" / "N18-3011.pdf").read_bytes())
    nodes = [{"type": n["type"], "text": n["text"], "page": n["page"]} if n["type"] == "text" else
             {"type": "image", "image_url": f"pdf#{n['index']}", "page": n["page"]} for n in parsed["nodes"]]
    doc = {"id": "acl", "url": "https://aclanthology.org/N18-3011.pdf", "kind": "pdf", "nodes": nodes,
           "text": "\n\n".join(n["text"] for n in nodes if n["type"] == "text"), "scores": {}}
    kept, _ = _screen(doc)
    assert not isinstance(kept, Drop), kept
    abstract = [json.loads(line) for line in open(DATA / "pdf" / "labels.jsonl")
                if json.loads(line)["path"].endswith("N18-3011.pdf")][0]["abstract_first_300"]
    first = " ".join(n["text"] for n in kept["nodes"][:8] if n["type"] == "text")
    words = tokenize(abstract.lower())
    assert sum(w in set(tokenize(first.lower())) for w in words) / len(words) >= 0.9


def test_removed_paragraphs_in_a_run_and_its_report(tmp_path):
    """The interleaved stages over the sample's real pages, 1 and 2 workers: the same documents byte for
    byte; no removed paragraph left in a document; three examples per rule in node_examples.json, and
    the report's table of paragraph rules per kind of document."""
    from pipelines.config import load_config
    from pipelines.report import write_report
    from pipelines.run import run

    stages = ["interleaved", "interleaved_text", "interleaved_exact_dedup", "interleaved_near_dedup",
              "interleaved_images", "interleaved_dedup", "interleaved_vlm", "interleaved_write"]
    warc = Path(__file__).resolve().parents[1] / "sample" / "interleaved-dev-slice.warc.gz"
    tiny = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        cfg = load_config(tiny, input=[str(warc)], output=str(out), workers=workers)
        summary = run(cfg.model_copy(update={"stages": stages}), echo=False)
        outputs[workers] = {p.name: p.read_bytes() for p in sorted((out / "docs" / "interleaved").glob("*.parquet"))}
    assert outputs[1] and outputs[1] == outputs[2]
    out = tmp_path / "w2"
    stats = {s["stage"]: s for s in summary["stages"]}["interleaved_text"]
    removed = {k: v for k, v in stats["extra"].items() if k.startswith("nodes/removed:web/")}
    assert removed["nodes/removed:web/node_words"] > 0 and removed["nodes/removed:web/node_special_characters"] > 0
    examples = json.loads((out / "interleaved_text" / "node_examples.json").read_text())
    assert sorted(examples) == sorted(k.removeprefix("nodes/removed:") for k in removed)
    assert all(1 <= len(v) <= 3 for v in examples.values())
    import pyarrow.parquet as pq

    kept = "\n".join(n["text"] or "" for f in sorted((out / "docs" / "interleaved").glob("*.parquet"))
                     for row in pq.read_table(f).to_pylist() for n in row["nodes"] if n["type"] == "text")
    assert all(e["text"] not in kept.split("\n") for v in examples.values() for e in v)
    cfg = load_config(tiny, input=[str(warc)], output=str(out), workers=2)
    _, md = write_report(str(out), cfg.model_dump())
    report = Path(md).read_text()
    assert "| interleaved_text | web | node_words |" in report
    web_in = stats["extra"]["kind:web/in"]
    assert web_in == stats["in"] and f"| interleaved_text | web | {web_in} | {stats['out']} |" in report


def test_the_document_rules_count_a_tables_words_not_its_separators():
    """A track list kept as table rows (cells joined by ` | `): no row is a keyword run to the punctuation
    rule (its separators count as marks), and the alphabetic-word rule sees the cells' words; with the
    separators counted as words without a letter the same text would fail it."""
    from filters.quality import QualityConfig, QualityFilter
    from pipelines.stage import Drop

    titles = ["Morning train", "Old harbour", "Silver rain", "Paper moon", "Northern lights", "Quiet river",
              "Broken clock", "Summer fields", "Winter coat", "Open window", "Last dance", "Long road"]
    places = ["Berlin", "London", "Lisbon", "Oslo", "Dublin", "Vienna", "Prague", "Madrid", "Paris", "Rome",
              "Athens", "Warsaw"]
    rows = [f"{title} | {place} | {kind} | {who}" for title, place, kind, who in zip(
        titles, places, ["live", "studio", "demo", "acoustic"] * 3, ["singer", "band", "choir"] * 4)]
    prose = ("The album was recorded over three weeks in a small studio, and the band kept the first take of most "
             "songs. Critics praised the warm sound and the plain arrangements, and the record sold well in Europe. "
             "Its songs are listed below.")
    text = prose + "\n" + "\n".join(rows)
    doc = {"id": "album", "url": "https://example.org/album", "kind": "web", "text": text, "scores": {},
           "nodes": [{"type": "text", "text": text}, {"type": "image", "image_url": "https://example.org/cover.jpg",
                                                       "caption": "", "alt": "cover", "position": 0}]}
    assert filter_text_nodes(doc["nodes"], RULES, by_line=True)[1] == []  # every row stays
    out, _ = _screen(doc)
    judged = out.doc if isinstance(out, Drop) else out
    # the quality rules pass it (the synthetic-text scorers, last, may take this made-up prose for a model's)
    assert not isinstance(out, Drop) or out.reason in ("llm_generated", "poor_mt"), out
    assert dict(judged["scores"])["gopher_alpha_word_ratio"] == 1.0
    assert judged["text"] == text  # the document keeps its separators
    rules = QualityFilter(QualityConfig())
    assert "gopher_alpha_words" in rules(text, "en")[0]


def test_the_compiled_paragraph_counts_are_the_oracle_s_on_real_pages():
    """Every paragraph of the real pages of tests/data/interleaved (several scripts), as the stage reads them."""
    from filters.nodes import paragraph_counts, paragraph_counts_python

    paragraphs = [p for name in sorted(PAGES) if name.endswith(".html")
                  for n in _web_doc(name)["nodes"] if n["type"] == "text" for p in n["text"].split("\n")]
    assert len(paragraphs) > 500
    assert [paragraph_counts(p) for p in paragraphs] == [paragraph_counts_python(p) for p in paragraphs]
