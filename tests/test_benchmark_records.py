"""docs/benchmarks.md is written by benchmarks/record.py from the scripts' latest records, and says nothing
else: a row per benchmark script, each record well formed."""

from __future__ import annotations

import json

from benchmarks import record


def test_the_benchmarks_page_is_the_records_rendered():
    assert record.DOC.read_text() == record.render(), "run `python benchmarks/record.py` after editing a record"


def test_every_script_has_a_row_and_every_record_a_script():
    page = record.DOC.read_text()
    names = {p.stem for p in record.scripts()}
    assert names and all(f"| `{name}.py" in page for name in names)
    for path in record.RESULTS.glob("*.json"):
        rec = json.loads(path.read_text())
        if "script" not in rec:  # a script's input kept beside the records (crawl_projection's measurement)
            continue
        assert rec["script"] == f"{path.stem}.py" and path.stem in names
        assert rec["headline"] and {"commit", "date", "machine", "args", "result"} <= rec.keys()


def test_a_record_rewrites_its_row(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(record, "DOC", tmp_path / "benchmarks.md")
    record.record("benchmarks/minhash.py", {"speedup": 2.5, "documents": 1200}, {"speedup": 2.5}, argv=["--repeat", "2"])
    first = record.DOC.read_text()
    assert "| `minhash.py --repeat 2` |" in first and "speedup: 2.5; documents: 1,200" in first
    assert "not run since records began" in first  # the other scripts, none recorded here
    record.record("benchmarks/minhash.py", {"speedup": 3.0}, {"speedup": 3.0}, argv=[])
    page = record.DOC.read_text()
    assert "speedup: 3" in page and "2.5" not in page


def test_every_script_records_its_run():
    assert [p.name for p in record.scripts() if "record(__file__" not in p.read_text()] == []


def test_records_name_no_path_of_the_machine_they_ran_on():
    assert record.portable({"warc": str(record.ROOT.parent / "data" / "x.warc.gz"), "n": [1, "ok"]}) == \
        {"warc": "../data/x.warc.gz", "n": [1, "ok"]}
    for path in record.RESULTS.glob("*.json"):
        assert str(record.ROOT.parent) not in path.read_text(), path.name


def test_every_groupbykey_on_the_per_page_path_says_what_it_is_for():
    """The measured run's GroupByKeys that shuffle at least a byte a page (benchmarks/crawl_projection.py,
    its committed measurement) each have a reason in WHY: a shuffle at crawl scale is justified by the
    rule or join that needs it, beside its measured bytes in docs/crawl.md."""
    from benchmarks import crawl_projection

    measured = json.loads((record.RESULTS / "crawl_measure.json").read_text())["runs"]
    groups = crawl_projection.per_page_groups(measured)
    assert len(groups) > 30 and [g["gbk"] for g in groups if not g["why"]] == []
    rounds = next(g for g in groups if g["gbk"] == "near_dedup/Dedup/Components/LargeStarN/Neighbours")
    assert rounds["count"] == 12  # the unrolled rounds count as one, with their number
    assert crawl_projection.why("near_dedup/Dedup/Survivors/GroupKeys").startswith("near dedup")
    assert crawl_projection.why("no/such/GroupByKey") == ""
