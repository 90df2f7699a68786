"""Progress lines of a local run (pipelines/progress.py): what the reader reports, what the driver
prints, and a real run's lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipelines.config import load_config
from pipelines.progress import FileProgress, Progress
from pipelines.run import run
from tests.warc_factory import MINI

TINY = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")


def test_the_driver_adds_up_the_reports_and_gives_an_eta(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    FileProgress(str(folder), "a.warc.gz").update(lambda: 300, 10, done=True)
    FileProgress(str(folder), "b.warc.gz").update(lambda: 200, 5)
    (folder / "c.json.123.tmp").write_text("{half a fi")  # a report being written is not read
    r, w = os.pipe()
    marker = tmp_path / "read" / "_SUCCESS"
    with Progress(str(folder), 1000, 2, {"read+extract": [str(marker)]}, console=w, tty=False,
                  plain_every_s=3600) as p:
        assert p.read_state() == (500, 15, 1)
        line = p.line()
        assert line.startswith("read 50% (500 B of 1.0 kB, 15 records, 1 files done)") and "ETA" in line
        marker.parent.mkdir()
        marker.write_text("{}")
    out = os.read(r, 10_000).decode()
    os.close(r)
    assert "done: read+extract after" in out and out.rstrip().splitlines()[-1].startswith("read 50%")


def test_a_run_prints_bytes_read_and_each_group_and_quiet_prints_nothing(tmp_path, capfd):
    cfg = load_config(TINY, input=[str(MINI)], workers=1, stages=["read", "extract", "language"])
    run(cfg.model_copy(update={"output": str(tmp_path / "a")}), echo=False)
    err = capfd.readouterr().err
    size = MINI.stat().st_size
    assert "done: read+extract after" in err and "done: language after" in err
    last = [line for line in err.splitlines() if line.startswith("read ")][-1]
    assert last.startswith(f"read all 1 files ({size / 1000:.1f} kB, ") and "0 groups running" in last
    reports = list((tmp_path / "a" / "logs" / "progress").glob("*.json"))
    assert [json.loads(p.read_text())["bytes"] for p in reports] == [size]
    run(cfg.model_copy(update={"output": str(tmp_path / "b"), "stages": ["read", "extract"]}), echo=False,
        progress=False)
    assert "read all" not in capfd.readouterr().err
