"""The whole graph on engines other than the local FnApiRunner, compared byte for byte with it: every
branch (text, pairs, interleaved with a PDF), the mixing and the shards, on the tiny config.

- Prism, Beam's Go runner, at the Python SDK's version (`make engines` builds it from the Go module
  proxy);
- Spark, through Beam's Spark job server in `local[2]` (`make engines` assembles it from Maven Central's
  runner jars at 2.62.0, configs/engines/spark-job-server.pom.xml), with Python's fusion
  (`pre_optimize=all`: the 2.62 job server's own fuser rejects a Flatten whose input also feeds
  another transform, apache/beam issue 34647).

SDK workers run as LOOPBACK, in this process, as a cluster without Docker runs them. The engines'
paths come from pipelines/run.py (`engine_args`): nothing is downloaded at run time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.run import ENGINE_BINARIES, engine_args, run
from tests.test_portable import _outputs
from tests.warc_factory import DATA, MINI

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
INPUTS = [str(MINI), str(DATA / "warc" / "whirlwind.warc.gz"), str(DATA / "warc" / "whirlwind.warc.wet.gz")]
ENGINES = {
    "PrismRunner": ["--runner=PrismRunner", "--environment_type=LOOPBACK"],
    "SparkRunner": ["--runner=SparkRunner", "--spark_master_url=local[2]", "--environment_type=LOOPBACK",
                    "--experiments=pre_optimize=all"],
}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fnapi")
    summary = run({**load_config(TINY, input=INPUTS, output=str(out), workers=1)}, echo=False)
    return out, summary


def _curate_run(out: Path, beam_args: list[str], seconds: int) -> dict:
    """`curate run` as a user types it, engine options after `--`, bounded in time (Beam's job servers
    install signal handlers, so a run on them wants a main thread of its own); its summary."""
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "--config", TINY, "--input", *INPUTS, "--output", str(out),
           "--workers", "1", "--quiet", "--", *beam_args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "stats" / "summary.json").read_text())


@pytest.mark.parametrize("runner", list(ENGINES))
def test_an_engine_gives_the_local_runner_s_bytes(runner, local_run, tmp_path):
    option, binary = ENGINE_BINARIES[runner]
    assert Path(binary).exists(), f"{binary} is missing: `make engines` builds it"
    local_out, local = local_run
    summary = _curate_run(tmp_path, ENGINES[runner], 600)
    assert summary["runner"] == runner and local["runner"] == "FnApiRunner"
    assert json.loads((tmp_path / "stats" / "audit.json").read_text())["ok"]
    assert [(s["stage"], s["in"], s["out"], s["dropped"]) for s in summary["stages"]] == \
        [(s["stage"], s["in"], s["out"], s["dropped"]) for s in local["stages"]]
    ours = _outputs(local_out)
    assert any(k.startswith("docs/text/") for k in ours) and any(k.startswith("docs/interleaved/") for k in ours)
    assert any(k.startswith("shards/") for k in ours)
    assert _outputs(tmp_path) == ours


def test_the_engines_are_the_pinned_ones_and_are_passed_unless_named():
    makefile = (ROOT / "Makefile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    beam = re.search(r'"apache-beam==([\d.]+)"', pyproject).group(1)
    assert re.search(r"^BEAM_VERSION := ([\d.]+)$", makefile, re.M).group(1) == beam  # Prism = the SDK's version
    prism = ENGINE_BINARIES["PrismRunner"][1]
    assert engine_args("PrismRunner", []) == [f"--prism_location={prism}"]
    assert engine_args("PrismRunner", ["--prism_location=/opt/prism"]) == []
    assert engine_args("FnApiRunner", []) == [] and engine_args("DataflowRunner", []) == []
