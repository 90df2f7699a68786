"""Stage orchestration: one Beam pipeline per stage, completion markers, resume, per-stage stats.

OUT/<stage>/        the stage's documents (Parquet), stats.json and _SUCCESS (with the stage fingerprint)
OUT/dropped/<stage> every dropped document with stage, reason, detail and scores (if write_dropped)
OUT/docs/text       final documents; OUT/docs/pdf: PDF responses for the interleaved branch
OUT/stats/summary.json  per stage: in, out, dropped {reason: n}, extra counters, wall_s
"""

from __future__ import annotations

import logging
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import io
from pipelines.config import TEXT_STAGES, stage_fingerprint
from pipelines.stages import STAGES
from pipelines.stats import format_table

log = logging.getLogger("curate")
LOCAL_RUNNERS = {"FnApiRunner", "DirectRunner"}
# Folders a stage owns besides OUT/<stage> and OUT/dropped/<stage>: cleared before it reruns.
EXTRA_OUTPUTS = {"read": ["docs/pdf"], "write": ["docs/text"]}


class StageInvariantError(RuntimeError):
    """in != out + Σ dropped: a record was lost or duplicated. Always a bug, never data."""


def pipeline_options(cfg: dict) -> PipelineOptions:
    args = [f"--runner={cfg['runner']}"]
    if cfg["runner"] in LOCAL_RUNNERS:
        workers = int(cfg["workers"])
        mode = "multi_processing" if workers > 1 else "in_memory"
        args += [f"--direct_num_workers={workers}", f"--direct_running_mode={mode}"]
    return PipelineOptions(args + list(cfg["beam_args"]))  # user options last: they win


def _stats_to_json(stage_dir: str):
    def write(pairs):
        stats = {"in": 0, "out": 0, "dropped": {}, "extra": {}}
        for key, n in sorted(pairs):
            if key in ("in", "out"):
                stats[key] += n
            elif key.startswith("dropped/"):
                stats["dropped"][key[len("dropped/"):]] = n
            else:
                stats["extra"][key] = n
        io.write_json(io.join(stage_dir, "stats.json"), stats)
    return write


def run_stage(name: str, cfg: dict, root: str, upstream: str | None) -> dict:
    stage = STAGES[name]
    stage_dir = io.join(root, name)
    with beam.Pipeline(options=pipeline_options(cfg)) as p:
        inputs = io.read_parquet(p, io.join(root, upstream), "ReadInput") if upstream else None
        docs, drops, counters = stage.build(p, cfg, inputs, root)
        parts = [counters, drops | "CountDropped" >> beam.Map(lambda d: (f"dropped/{d['reason']}", 1))]
        if inputs is not None:
            parts.append(inputs | "CountIn" >> beam.Map(lambda _: ("in", 1)))
        if docs is not None:
            shards = cfg[name].get("shards", 0) if isinstance(cfg.get(name), dict) else 0
            io.write_parquet(docs, stage_dir, stage.schema, "WriteDocs", shards)
            parts.append(docs | "CountOut" >> beam.Map(lambda _: ("out", 1)))
        if cfg["write_dropped"]:
            io.write_parquet(drops, io.join(root, "dropped", name), io.DROP_SCHEMA, "WriteDropped")
        (parts | "AllCounters" >> beam.Flatten() | "Sum" >> beam.CombinePerKey(sum)
         | "Collect" >> beam.combiners.ToList() | "WriteStats" >> beam.Map(_stats_to_json(stage_dir)))
    return io.read_json(io.join(stage_dir, "stats.json"))


def check_identity(name: str, stats: dict) -> None:
    if name == "write":
        return
    total = stats["out"] + sum(stats["dropped"].values())
    if stats["in"] != total:
        raise StageInvariantError(f"stage {name}: in={stats['in']} but out + dropped = {total}: {stats}")


def run(cfg: dict, stages: list[str] | None = None, force: bool = False) -> dict:
    """Run the configured stages in order, reusing finished ones whose fingerprint matches."""
    root = cfg["output"]
    selected = stages or cfg["stages"]
    summary = {"output": root, "input": cfg["input"], "runner": cfg["runner"], "workers": cfg["workers"],
               "stages": []}
    upstream, upstream_fp = None, ""
    for name in (s for s in TEXT_STAGES if s in cfg["stages"]):
        fp = stage_fingerprint(cfg, name, upstream_fp)
        marker = io.read_json(io.join(root, name, "_SUCCESS"))
        if marker and marker["fingerprint"] == fp and not (force and name in selected):
            stats, reused = marker["stats"], True
            log.info("stage %s: finished earlier with the same config, reused", name)
        elif name not in selected:
            raise RuntimeError(f"stage {name} has no finished output for this config; add it to --stages")
        else:
            for folder in [name, f"dropped/{name}"] + EXTRA_OUTPUTS.get(name, []):
                io.delete_tree(io.join(root, folder))
            started = time.time()
            log.info("stage %s: running", name)
            stats = run_stage(name, cfg, root, upstream)
            stats["wall_s"] = round(time.time() - started, 2)
            check_identity(name, stats)
            io.write_json(io.join(root, name, "_SUCCESS"), {"fingerprint": fp, "stats": stats})
            reused = False
        summary["stages"].append({"stage": name, **stats, "reused": reused})
        upstream, upstream_fp = (upstream if name == "write" else name), fp
    io.write_json(io.join(root, "stats", "summary.json"), summary)
    print(format_table(summary))
    return summary
