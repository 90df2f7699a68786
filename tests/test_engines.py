"""The whole graph on engines other than the local FnApiRunner, compared byte for byte with it: every
branch (text, pairs, interleaved with a PDF), the mixing and the shards, on the tiny config.

- Prism, Beam's Go runner, at the Python SDK's version (`make engines` builds it from the Go module
  proxy);
- Spark, through Beam's Spark job server in `local[2]`;
- Flink, through Beam's Flink job server on an embedded cluster (`[local]`), parallelism 2.

`make engines` assembles both job servers from Maven Central's runner jars at 2.62.0
(configs/engines/*.pom.xml); they fuse the graph themselves, with Beam's Java fuser. SDK workers run
as LOOPBACK, in this process, as a cluster without Docker runs them. The engines' paths and settings
come from pipelines/run.py (`engine_args`): nothing is downloaded at run time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

from pipelines.config import UserError, load_config
from pipelines.run import ENGINE_BINARIES, engine_args, run
from tests.test_portable import _outputs
from tests.warc_factory import DATA, MINI

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
INPUTS = [str(MINI), str(DATA / "warc" / "whirlwind.warc.gz"), str(DATA / "warc" / "whirlwind.warc.wet.gz")]
ENGINES = {
    "PrismRunner": ["--runner=PrismRunner", "--environment_type=LOOPBACK"],
    "SparkRunner": ["--runner=SparkRunner", "--spark_master_url=local[2]", "--environment_type=LOOPBACK"],
    "FlinkRunner": ["--runner=FlinkRunner", "--flink_master=[local]", "--parallelism=2", "--environment_type=LOOPBACK"],
}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The tiny config on FnApiRunner: its output folder, its summary, and the Runner API graph of
    every pipeline the run submitted."""
    out = tmp_path_factory.mktemp("fnapi")
    graphs, submit = [], beam.Pipeline.run

    def run_and_keep(pipeline, *args, **kwargs):
        graphs.append(pipeline.to_runner_api())
        return submit(pipeline, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(beam.Pipeline, "run", run_and_keep)
        summary = run(load_config(TINY, input=INPUTS, output=str(out), workers=1), echo=False)
    return out, summary, graphs


def flatten_inputs_read_elsewhere(graph) -> list[tuple[str, str]]:
    """(Flatten, the transform producing its input) pairs where a GroupByKey or a side input also reads
    that input: the shape
    Beam's Java fuser, which the Flink and Spark job servers run, cannot place (apache/beam issue
    34647: "PCollectionNode should have exactly one producing PTransformNode")."""
    transforms = [t for t in graph.components.transforms.values() if not t.subtransforms]
    producer = {pcoll: t.unique_name for t in transforms for pcoll in t.outputs.values()}
    urns = common_urns.primitives

    def materializes(consumer, pcoll) -> bool:
        if consumer.spec.urn == urns.GROUP_BY_KEY.urn:
            return pcoll in consumer.inputs.values()
        if consumer.spec.urn == urns.PAR_DO.urn:
            side = beam_runner_api_pb2.ParDoPayload.FromString(consumer.spec.payload).side_inputs
            return any(consumer.inputs[tag] == pcoll for tag in side)
        return False

    return [(flatten.unique_name, producer[pcoll])
            for flatten in transforms if flatten.spec.urn == urns.FLATTEN.urn
            for pcoll in set(flatten.inputs.values())
            if any(materializes(t, pcoll) for t in transforms if t is not flatten)]


def test_no_flatten_input_is_also_grouped_or_a_side_input(local_run):
    graphs = local_run[2]
    assert graphs and all(len(g.components.transforms) > 100 for g in graphs)
    assert [pair for g in graphs for pair in flatten_inputs_read_elsewhere(g)] == []


def test_the_rule_finds_the_shape_the_java_fuser_rejects():
    with beam.Pipeline() as p:  # the reproduction in apache/beam issue 34647, plus a side input
        a = p | "a" >> beam.Create([("a", 1)])
        b = p | "b" >> beam.Create([("b", 2)])
        _ = (a, b) | "Both" >> beam.Flatten() | "Print" >> beam.Map(str)
        _ = a | "Group" >> beam.GroupByKey()
        _ = p | "c" >> beam.Create([0]) | "Side" >> beam.Map(lambda x, s: x, beam.pvalue.AsList(b))
        graph = p.to_runner_api()
    assert sorted(flatten_inputs_read_elsewhere(graph)) == [("Both", "a/Map(decode)"), ("Both", "b/Map(decode)")]


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
    local_out, local, _ = local_run
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
    assert engine_args("PrismRunner", []) == [f"--prism_location={prism}", "--job_server_timeout=2592000"]
    assert engine_args("PrismRunner", ["--prism_location=/opt/prism", "--job_server_timeout=60"]) == []
    assert engine_args("FnApiRunner", []) == [] and engine_args("DataflowRunner", []) == []
    flink = engine_args("FlinkRunner", ["--job_server_jvm_properties=-Xss64m"])
    assert f"--flink_job_server_jar={ENGINE_BINARIES['FlinkRunner'][1]}" in flink and "--streaming" in flink
    assert not any(a.startswith("--job_server_jvm_properties") for a in flink)
    assert "--streaming" not in engine_args("FlinkRunner", ["--streaming"])


def test_dataflow_translates_the_configured_job_offline():
    """configs/dataflow.yaml as written, with Beam's --dry_run: DataflowRunner validates the options and
    translates the whole graph into the job it would submit (the worker image at the SDK's version,
    this package's sdist from --setup_file staged as workflow.tar.gz), with no network and nothing
    read or written."""
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "--config", "configs/dataflow.yaml", "--", "--dry_run=true"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("dry run: DataflowRunner took the graph"), line
    assert int(re.search(r"\(([\d,]+) transforms", line).group(1).replace(",", "")) > 1000
    assert "beam_python3.11_sdk:2.77.0" in line and "workflow.tar.gz" in line


def test_a_dry_run_on_a_runner_that_would_run_it_is_refused(tmp_path):
    cfg = load_config(TINY, input=INPUTS, output=str(tmp_path), workers=1)
    with pytest.raises(UserError, match="only DataflowRunner"):
        run(cfg.model_copy(update={"beam_args": ["--dry_run=true"]}), echo=False)
    assert not any(tmp_path.iterdir())
