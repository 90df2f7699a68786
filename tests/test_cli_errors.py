"""A user's mistake gets one line and exit code 2, never a traceback (internal errors keep theirs)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.run import run

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
MINI = ROOT / "tests" / "data" / "warc" / "mini.warc.gz"


def curate(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args, message", [
    (["stats", "/nonexistent/run"], "curate: no finished run under /nonexistent/run (no stats/summary.json)"),
    (["report", "/nonexistent/run"], "curate: no run in /nonexistent/run: stats/summary.json is missing; pass a run's "
                                     "output folder"),
    (["score", "--input", "/nonexistent.jsonl", "--output", "/tmp/x.jsonl"], "curate: --input /nonexistent.jsonl: "
                                                                            "no such file"),
    (["run", "--config", TINY, "--workers", "0"], "workers: Input should be greater than or equal to 1 (got 0)"),
    (["run", "--config", TINY, "--input", "/nonexistent/*.warc.gz"], "curate: input '/nonexistent/*.warc.gz' "
                                                                     "matches no file"),
    (["run", "--config", TINY, "--output", "/tmp/curate-bogus", "--stages", "bogus"], "--stages: unknown stages "
                                                                                      "['bogus']"),
    (["run", "--config", "/nonexistent.yaml"], "curate: cannot read config /nonexistent.yaml: No such file"),
    (["train", "--shards", "/nonexistent", "--steps", "1"], "curate train: --shards /nonexistent: no such folder"),
])
def test_user_errors_are_one_line_and_exit_2(args, message):
    proc = curate(*args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and message in proc.stderr.strip().splitlines()[-1], proc.stderr[-500:]


def test_score_gives_a_verdict_per_line_and_counts_lines_without_text(tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    text = ("The committee met on Tuesday to discuss the budget. Members agreed to postpone the vote until "
            "next month.")
    src.write_text(json.dumps({"text": text}) + "\n" + json.dumps({"id": 1}) + "\n")
    proc = curate("score", "--input", str(src), "--output", str(dst))
    assert proc.returncode == 0 and "scored 1 lines, 1 without a text field" in proc.stdout
    first, second = [json.loads(line) for line in dst.read_text().splitlines()]
    assert first["verdict"] == first["quality_failed"][0] == "gopher_too_few_words" and "verdict" not in second
    src.write_text("not json\n")
    proc = curate("score", "--input", str(src), "--output", str(dst))
    assert proc.returncode == 2 and proc.stderr.strip().endswith(f"{src}:1: not JSON (Expecting value)")


def test_input_without_warc_records_warns(tmp_path, caplog):
    junk = tmp_path / "notes.warc.gz"
    junk.write_text("these are not WARC records\n" * 20)
    cfg = load_config(TINY, input=[str(junk)], output=str(tmp_path / "out"), workers=1, stages=["read", "extract"])
    with caplog.at_level(logging.WARNING, logger="curate"):
        summary = run(cfg, echo=False)
    assert summary["stages"][0]["dropped"] == {"not_warc_data": 1}
    assert any("stage read: no documents from 1 input files (not_warc_data=1)" in r.getMessage() for r in caplog.records)


def test_summary_records_the_runner_that_ran(tmp_path):
    cfg = load_config(TINY, input=[str(MINI)], output=str(tmp_path / "out"), workers=1, stages=["read"])
    cfg.beam_args = ["--runner=DirectRunner"]  # as `curate run -- --runner=DirectRunner` gives it
    assert run(cfg, echo=False)["runner"] == "DirectRunner"


def test_help_names_every_command_and_the_beam_options():
    top = curate("--help").stdout
    assert all(cmd in top for cmd in ("run", "stages", "stats", "report", "score", "train-filter", "fit-lm-head",
                                      "train"))
    assert "Everything after `--` goes to Beam" in curate("run", "--help").stdout
    assert "main(argv)" not in curate("train", "--help").stdout
