"""Runs that used to lose or duplicate records silently: a rerun after the input changed, a file or
record read twice, empty files, truncated captures, and the loss audit that checks every run.
Damaged inputs are built at test time from the real fixture (tests/data/warc/mini.warc.gz)."""

import gzip
import logging
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.audit import LossAuditError, audit
from pipelines.config import load_config
from pipelines.run import pipeline_options, run
from tests.warc_factory import MINI, gz, html_page, real_members, response_record

TEXT_BRANCH = ["read", "extract", "language", "quality", "synthetic", "exact_dedup", "near_dedup", "crosslingual", "write"]

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
MINI_UNITS = 126  # records in the fixture (tests/test_warc.py)


def rows(folder: Path) -> list[dict]:
    return [r for path in sorted(folder.glob("*.parquet")) for r in pq.read_table(path).to_pylist()]


def read_extract(tmp_path: Path, inputs: list[str], out: Path):
    cfg = load_config(TINY, input=inputs, output=str(out), workers=1)
    cfg.stages = ["read", "extract"]
    return {s["stage"]: s for s in run(cfg, echo=False)["stages"]}


def test_rerun_reads_a_new_file_under_an_old_glob(tmp_path, caplog):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(MINI, folder / "a.warc.gz")
    pattern = str(folder / "*.warc.gz")
    first = read_extract(tmp_path, [pattern], tmp_path / "out")
    assert first["read"]["in"] == MINI_UNITS
    members = real_members()
    (folder / "b.warc.gz").write_bytes(b"".join(members[:5]))
    with caplog.at_level(logging.INFO, logger="curate"):
        second = read_extract(tmp_path, [pattern], tmp_path / "out")
    assert not second["read"]["reused"] and second["read"]["in"] == MINI_UNITS + 5
    assert "1 added" in caplog.text and "b.warc.gz" in caplog.text
    (folder / "b.warc.gz").write_bytes(b"".join(members[:7]))  # changed in place
    third = read_extract(tmp_path, [pattern], tmp_path / "out")
    assert not third["read"]["reused"] and third["read"]["in"] == MINI_UNITS + 7
    assert read_extract(tmp_path, [pattern], tmp_path / "out")["read"]["reused"]


def test_a_file_listed_twice_and_a_copy_give_one_row_per_record(tmp_path):
    copy = tmp_path / "copy.warc.gz"
    shutil.copy(MINI, copy)
    cfg = load_config(TINY, input=[str(MINI), str(MINI), str(copy)], output=str(tmp_path / "out"), workers=1)
    summary = run(cfg.model_copy(update={"stages": TEXT_BRANCH + ["pack"]}), echo=False)
    stages = {s["stage"]: s for s in summary["stages"]}
    assert stages["read"]["in"] == 2 * MINI_UNITS  # the file matched twice is read once
    kept = rows(tmp_path / "out" / "docs" / "text")
    assert kept and len({d["id"] for d in kept}) == len(kept)
    assert stages["pack"]["extra"]["tokenize/docs"] == len(kept)
    assert summary["audit"]["ok"] and summary["audit"]["files"] == 2


def test_a_record_repeated_in_one_file_is_one_record(tmp_path):
    members = real_members()
    response = next(m for m in members if b"WARC-Type: response" in gzip.decompress(m)[:600])
    path = tmp_path / "repeat.warc.gz"
    path.write_bytes(b"".join(members) + response)
    stages = read_extract(tmp_path, [str(path)], tmp_path / "out")
    assert stages["read"]["in"] == MINI_UNITS + 1
    assert stages["read"]["dropped"]["duplicate_record"] == 1
    dropped = rows(tmp_path / "out" / "dropped" / "read")
    assert [d["reason"] for d in dropped].count("duplicate_record") == 1


def test_empty_files_and_truncated_captures_are_counted(tmp_path):
    empty = tmp_path / "empty.warc.gz"
    empty.write_bytes(b"")
    record = response_record("http://cut.test/", html_page(["A page that the crawler cut short. " * 30]))
    record = record.replace(b"WARC-Date:", b"WARC-Truncated: length\r\nWARC-Date:", 1)
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(gz(record))
    stages = read_extract(tmp_path, [str(empty), str(cut)], tmp_path / "out")
    assert stages["read"]["dropped"]["empty_file"] == 1
    assert stages["read"]["extra"]["records/truncated"] == 1
    assert stages["extract"]["out"] == 1  # the truncated capture's text is kept


def test_damaged_plain_warc_loses_only_the_damaged_record(tmp_path):
    plain = gzip.decompress(MINI.read_bytes())
    cut = plain.find(b"WARC/1.1", len(plain) // 2)
    path = tmp_path / "plain.warc"
    path.write_bytes(plain[:cut] + b"\x00" * 15 + plain[cut:])  # junk between two records
    stages = read_extract(tmp_path, [str(path)], tmp_path / "out")
    assert stages["read"]["in"] == MINI_UNITS + 1
    assert stages["read"]["dropped"]["not_warc_data"] == 1
    assert stages["read"]["extra"]["read/skipped_bytes"] == 15


def test_loss_audit_names_a_lost_row(tmp_path):
    out = tmp_path / "out"
    summary = run(load_config(TINY, input=[str(MINI)], output=str(out), workers=1, stages=TEXT_BRANCH), echo=False)
    assert summary["audit"]["stages"] == TEXT_BRANCH and summary["audit"]["kept"] == "docs/text"
    assert summary["audit"]["ok"] and summary["audit"]["rows"] == len(rows(out / "docs" / "text")) + sum(
        len(rows(out / "dropped" / s)) for s in TEXT_BRANCH)
    victim = next(p for p in sorted((out / "dropped" / "quality").glob("*.parquet")) if pq.read_table(p).num_rows)
    table = pq.read_table(victim)
    pq.write_table(table.slice(1), victim)  # a row vanishes between stages
    cfg = load_config(TINY, output=str(out), workers=1)
    with pytest.raises(LossAuditError, match="file_rows_mismatch"):
        audit(pipeline_options(cfg), str(out), TEXT_BRANCH, "docs/text")
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), victim)  # and now one is there twice
    with pytest.raises(LossAuditError, match=table.column("id")[0].as_py()):
        audit(pipeline_options(cfg), str(out), TEXT_BRANCH, "docs/text")


def test_network_is_off_unless_the_users_config_turns_it_on(tmp_path, caplog):
    bare = tmp_path / "mine.yaml"
    bare.write_text("output: out/mine\nworkers: 1\nstages: [read, extract]\n")
    assert load_config(str(bare)).image_pairs.fetch.enabled is False
    for name in ("local.yaml", "dataflow.yaml", "flink.yaml", "spark.yaml", "tiny.yaml"):
        assert load_config(str(ROOT / "configs" / name)).image_pairs.fetch.enabled is False, name
    page = tmp_path / "page.warc.gz"  # a page without images: the notice is what is checked, not fetching
    page.write_bytes(gz(response_record("http://text.test/", html_page(["Only text, no image at all."]))))
    cfg = load_config(TINY, input=[str(page)], output=str(tmp_path / "out"), workers=1)
    cfg.stages, cfg.image_pairs.fetch.enabled = ["read", "extract", "image_pairs"], True
    cfg.image_pairs.fetch.allow_private = False
    with caplog.at_level(logging.WARNING, logger="curate"):
        run(cfg, echo=False)
    assert "image fetcher is ON" in caplog.text


def test_pages_whose_images_cannot_be_read_are_counted_by_the_image_stage(tmp_path):
    cfg = load_config(TINY, input=[str(MINI)], output=str(tmp_path / "out"), workers=1)
    cfg.stages, cfg.image_pairs.max_html_bytes = ["read", "extract", "image_pairs"], 20_000
    stages = {s["stage"]: s for s in run(cfg, echo=False)["stages"]}
    images = stages["image_pairs"]
    assert images["dropped"]["page_too_large"] == images["extra"]["images/pages_too_large"] > 0
    assert images["in"] == images["out"] + sum(images["dropped"].values())
