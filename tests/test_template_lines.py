"""Per-host template lines: the pure rule (filters/template_lines.py), the Beam transform
(pipelines/template_lines.py) in real FnApiRunner pipelines on 1 and 2 workers, and the quality stage
with `template_lines` on."""

import json

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from filters.template_lines import (MIN_PAGES, MIN_SHARE, host_of, is_template, line_hash, line_hashes,
                                    normalise_line, page_threshold, remove_template_lines, template_hashes)

# ---- pure logic ------------------------------------------------------------------------------------


def test_normalise_line():
    assert normalise_line("  Page 3   of\t12 ") == normalise_line("page 4 of 13") == "page 0 of 00"
    assert normalise_line("HOME") == "home"  # short lines count
    assert normalise_line("   \t ") == "" and normalise_line("") == ""
    assert normalise_line("Straße ٣") == "strasse 0"  # casefolded, Unicode digits too


def test_normalise_line_collapses_what_the_regex_calls_whitespace():
    """str.split's whitespace is the regex \\s's: every code point, between letters and runs of others,
    normalises as the regex definition (strip, \\s+ as one space, casefold, \\d as 0) does."""
    import re
    import sys

    def by_regex(line):
        return re.sub(r"\d", "0", re.sub(r"\s+", " ", line.strip()).casefold())

    points = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(points), 512):
        chunk = points[i:i + 512]
        for line in ("".join(chunk), "a".join(chunk), " x ".join(chunk[:64]) + " \u00a0\u2003 \t"):
            assert normalise_line(line) == by_regex(line), i


def test_line_hash_is_a_stable_64_bit_integer():
    h = line_hash("home")
    assert h == line_hash("home") and 0 <= h < 2 ** 64 and h != line_hash("about")
    assert h == int.from_bytes(__import__("hashlib").blake2b(b"home", digest_size=8).digest(), "big")
    assert line_hashes("A\n\nb\na\n  B  ") == tuple(sorted({line_hash("a"), line_hash("b")}))  # distinct, no empty


@pytest.mark.parametrize("url,host", [
    ("https://www.Example.com:8080/a?b#c", "example.com"),
    ("http://user:pw@news.example.co.uk/x", "news.example.co.uk"),
    ("http://WWW.example.org./", "example.org"),
    ("http://wwwexample.org/", "wwwexample.org"),
    ("", None), (None, None), ("not a url", None), ("http://[bad/", None),
])
def test_host_of(url, host):
    assert host_of(url) == host


def test_the_rule_at_its_thresholds():
    assert (MIN_PAGES, MIN_SHARE) == (3, 0.1)
    assert not is_template(2, 2) and not is_template(2, 10) and is_template(3, 3) and is_template(3, 30)
    assert page_threshold(30) == 3 and page_threshold(31) == 4  # the share binds from 31 pages up
    assert page_threshold(10_000) == 1000 and not is_template(999, 10_000) and is_template(1000, 10_000)
    assert page_threshold(10, min_pages=2) == 2 and page_threshold(100, min_share=0.5) == 50
    assert page_threshold(100, min_share=0.0) == 3
    assert template_hashes([(1, 3), (2, 2), (3, 40)], 40) == frozenset({3})  # 40 pages: 4 needed
    assert template_hashes([(1, 3), (2, 2)], 5) == frozenset({1})


def test_removal_keeps_other_lines_in_order():
    menu = frozenset(line_hash(normalise_line(s)) for s in ("Home", "About us", "Page 1 of 9"))
    text = "Home\nFirst paragraph.\n\n  about US \nSecond paragraph.\nPage 7 of 9\nThird."
    assert remove_template_lines(text, menu) == ("First paragraph.\n\nSecond paragraph.\nThird.", 3)
    assert remove_template_lines("Nothing here.\nAt all.", menu) == ("Nothing here.\nAt all.", 0)
    assert remove_template_lines(text, frozenset()) == (text, 0)
    assert remove_template_lines("Home\nAbout us", menu) == ("", 2)


# ---- the Beam transform ----------------------------------------------------------------------------

MENU = ["Home", "Recipes", "Contact us"]
NAMES = ["Alice", "Bruno", "Chiara", "Dmitri", "Elena"]


def _docs():
    docs = []
    for i, name in enumerate(NAMES):  # host A: the menu on every page, one line on pages 0 and 1 only
        body = [f"{name} tells her own story, line one.", f"{name} goes on with a second line."]
        rare = ["Subscribe to the spring newsletter."] if i < 2 else []
        docs.append({"id": f"a{i}", "url": f"https://www.a.example/post/{i}",
                     "text": "\n".join(MENU[:1] + body[:1] + MENU[1:] + rare + body[1:]), "scores": {}})
    for i, name in enumerate(NAMES[:4]):  # host B: its own texts, nothing on 3 pages; and a page without a URL
        docs.append({"id": f"b{i}", "url": f"http://b.example:8080/{i}", "text": f"A page by {name}.\nOnly {name}.",
                     "scores": {"x": 1.0}})
    docs.append({"id": "nourl", "url": None, "text": "Home\nRecipes\nContact us", "scores": {}})
    # three copies of one page of host C (recaptures with a different counter): one distinct page
    docs += [{"id": f"c{i}", "url": f"https://c.example/same?{i}", "text": f"Shared article.\nViews: {i}",
              "scores": {}} for i in range(3)]
    return docs


def _expected():
    out = []
    for doc in _docs():
        doc = dict(doc)
        removed = 0
        if doc["id"].startswith("a"):
            lines = doc["text"].split("\n")
            doc["text"] = "\n".join(line for line in lines if line not in MENU)
            removed = len(lines) - len(doc["text"].split("\n"))
        doc["scores"] = dict(sorted({**doc["scores"], "template_lines": float(removed)}.items()))
        out.append(doc)
    return out


def _run(workers: int, docs: list[dict]):
    from pipelines.template_lines import RemoveTemplateLines

    args = ["--runner=FnApiRunner", "--no_pipeline_type_check"]
    if workers > 1:
        args += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
    expected = _expected()
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        res = p | beam.Create(docs) | RemoveTemplateLines(3, 0.1)
        assert_that(res.docs, equal_to(expected), label="Docs")
        templates = res.templates | beam.MapTuple(lambda host, t: (host, sorted(t)))
        assert_that(templates, equal_to([("a.example", sorted(line_hash(normalise_line(m)) for m in MENU))]),
                    label="Templates")
        counters = res.counters | beam.CombinePerKey(sum)
        assert_that(counters, equal_to([("template_lines/hosts", 1), ("template_lines/template_lines", 3),
                                        ("template_lines/lines_removed", 15), ("template_lines/docs_changed", 5)]),
                    label="Counters")


def test_the_menu_goes_the_rare_line_stays_other_hosts_untouched():
    expected = {d["id"]: d for d in _expected()}
    assert "Subscribe to the spring newsletter." in expected["a0"]["text"]  # on 2 pages: stays
    assert not any(m in expected["a3"]["text"].split("\n") for m in MENU)
    assert expected["b1"]["text"] == "A page by Bruno.\nOnly Bruno." and expected["nourl"]["text"] == "Home\nRecipes\nContact us"
    assert expected["c2"]["text"] == "Shared article.\nViews: 2"  # copies of one page count once
    _run(1, _docs())


def test_one_and_two_workers_give_the_same_output():
    _run(2, list(reversed(_docs())))  # other order, two processes: the same documents and template set


# ---- the quality stage ------------------------------------------------------------------------------


P1 = ("wrote that the committee met on a grey morning to weigh the plan for the new library. After a long "
      "discussion of costs and staffing, it agreed to begin. Readers had asked for longer opening hours.")
P2 = ("added that the builders would start in spring. The old reading room would stay open while they "
      "worked. The town would hear about the progress of the whole project before the summer.")


def _quality(template_lines: bool, check):
    from filters.quality import QualityConfig
    from pipelines.config import config_model
    from pipelines.stages import QualityStage

    docs = [{"id": f"d{i}", "url": f"https://site.example/{i}", "warc_file": "f", "warc_offset": i, "warc_date": None,
             "lang": "en", "lang_score": 0.99, "charset": "utf-8", "scores": {},
             "text": "\n".join(["Site Example News", f"{name} {P1}", f"{name} {P2}", "Share this",
                                "Copyright Site Example"])} for i, name in enumerate(NAMES[:4])]
    cfg = config_model()(quality=QualityConfig(template_lines=template_lines))
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner", "--no_pipeline_type_check"])) as p:
        built = QualityStage().build(p, cfg, p | beam.Create(docs), "/unused")
        assert_that(built.docs, check, label="Docs")
        totals = built.counters | beam.CombinePerKey(sum)
        if template_lines:
            assert_that(totals, equal_to([("in", 4), ("out", 4), ("template_lines/hosts", 1),
                                          ("template_lines/template_lines", 3), ("template_lines/lines_removed", 12),
                                          ("template_lines/docs_changed", 4)]), label="Counters")


def _check_on(docs):
    assert len(docs) == 4
    for doc in docs:
        assert doc["scores"]["template_lines"] == 3.0, doc["scores"]
        assert doc["text"].split("\n")[1:] == [doc["text"].split(" ")[0] + " " + P2], doc["text"]
        assert "link_list_lines" in doc["scores"]  # the rules judged it after


def _check_off(docs):
    for doc in docs:
        assert "template_lines" not in doc["scores"] and doc["text"].startswith("Site Example News")


def test_the_quality_stage_removes_template_lines_and_records_them():
    _quality(True, _check_on)
    _quality(False, _check_off)


def test_no_template_anywhere_leaves_every_document_as_it_was():
    from pipelines.template_lines import RemoveTemplateLines

    docs = [{"id": str(i), "url": f"https://h{i % 2}.example/{i}", "text": f"Only {name} here.", "scores": {}}
            for i, name in enumerate(NAMES)]
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner", "--no_pipeline_type_check"])) as p:
        res = p | beam.Create(docs) | RemoveTemplateLines(3, 0.1)
        assert_that(res.docs, equal_to([{**d, "scores": {"template_lines": 0.0}} for d in docs]), label="Docs")
        assert_that(res.templates, equal_to([]), label="Templates")
        assert_that(res.counters, equal_to([]), label="Counters")


def test_the_same_record_twice_comes_out_twice_without_its_template_lines():
    docs = _docs() + [dict(d) for d in _docs() if d["id"] in ("a3", "nourl")]  # one id, two documents
    expected = _expected()
    expected += [d for d in expected if d["id"] in ("a3", "nourl")]
    from pipelines.template_lines import RemoveTemplateLines

    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner", "--no_pipeline_type_check"])) as p:
        res = p | beam.Create(docs) | RemoveTemplateLines(3, 0.1)
        assert_that(res.docs, equal_to(expected))


def test_template_sets_reach_the_documents_by_joins_never_a_side_input():
    """At web scale every host's template set is GBs: no worker may be handed all of them."""
    from pipelines.template_lines import RemoveTemplateLines

    p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner", "--no_pipeline_type_check"]))
    _ = p | beam.Create(_docs()) | "TL" >> RemoveTemplateLines(3, 0.1)
    transforms = p.to_runner_api().components.transforms.values()
    ours = [t for t in transforms if t.unique_name.startswith("TL/")]
    for t in ours:
        if t.spec.urn == "beam:transform:pardo:v1":
            from apache_beam.portability.api import beam_runner_api_pb2

            payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            assert not payload.side_inputs, t.unique_name
    assert any("JoinDocs" in t.unique_name for t in ours)


def test_the_beam_graph_agrees_with_the_in_memory_rule():
    from filters.template_lines import host_templates

    docs = _docs()
    expected = host_templates((host_of(d["url"]), line_hashes(d["text"])) for d in docs)
    assert expected == {"a.example": frozenset(line_hash(normalise_line(m)) for m in MENU)}
    _run(1, docs)  # whose Templates check is the same set


def test_curate_extract_removes_the_template_lines_a_run_removes(tmp_path, monkeypatch):
    """With template_lines on, `curate extract` extracts each page once and spools it while each host's
    template lines are counted over all of them, then removes them, and gives every page the text the
    run's quality rules judged. Input: sample/mixed-dev-slice.warc.gz, whose hosts share generated page
    templates."""
    import collections
    from pathlib import Path

    import pyarrow.parquet as pq
    import yaml

    from pipelines.cli import main as cli_main

    root = Path(__file__).resolve().parent.parent
    warc = str(root / "sample" / "mixed-dev-slice.warc.gz")
    config = yaml.safe_load((root / "configs" / "tiny.yaml").read_text())
    config["quality"] = {**config.get("quality", {}), "template_lines": True}
    path = tmp_path / "tl.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    assert cli_main(["run", "--config", str(path), "--input", warc, "--output", str(out), "--quiet",
                     "--stages", "read,extract,language,quality"]) == 0
    folders = [out / "synthetic", out / "dropped" / "quality", out / "dropped" / "synthetic"]  # what quality judged
    judged = [r for folder in folders for f in sorted(folder.glob("*.parquet"))
              for r in pq.read_table(f, columns=["url", "text", "scores"]).to_pylist()]
    removed = sum(dict(r["scores"]).get("template_lines", 0) for r in judged)
    assert removed > 20  # the slice's hosts do share template lines
    from pipelines.stages import ExtractText

    extracted = collections.Counter()
    step = ExtractText.step
    monkeypatch.setattr(ExtractText, "step", lambda self, raw: extracted.update([raw["id"]]) or step(self, raw))
    lines = tmp_path / "pages.jsonl"
    assert cli_main(["extract", "--input", warc, "--output", str(lines), "--config", str(path)]) == 0
    pages = list(map(json.loads, lines.read_text().splitlines()))
    got = collections.Counter((p["url"], p["text"]) for p in pages if p["text"] is not None)
    assert got == collections.Counter((r["url"], r["text"]) for r in judged)
    assert extracted and set(extracted.values()) == {1}  # one extraction per page, not one per pass
