"""Stage orchestration: one Beam pipeline per group of stages, completion markers, resume, per-stage stats.
Which stages exist, in which order, what each reads and writes, comes from the registry
(pipelines/stage.py); nothing here names a stage.

OUT/<stage>/        the stage's documents (Parquet) if it ends a group, stats.json and _SUCCESS (with the
                    stage fingerprint)
OUT/dropped/<stage> every dropped document with stage, reason, detail and scores (if write_dropped)
OUT/docs/text       final documents; OUT/docs/pdf: PDF responses for the interleaved branch
OUT/stats/summary.json  per stage: in, out, dropped {reason: n}, extra counters, wall_s
OUT/stats/audit.json    the loss audit of the rows read, through to the final documents (pipelines/audit.py)
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines import io
from pipelines.audit import audit
from pipelines.config import ConfigError, UserError, stage_fingerprint
from pipelines.stage import READS_INPUT
from pipelines.stages import STAGES
from pipelines.stats import format_table

log = logging.getLogger("curate")
LOCAL_RUNNERS = {"FnApiRunner", "DirectRunner"}


class StageInvariantError(RuntimeError):
    """in != out + Σ dropped: a record was lost or duplicated. Always a bug, never data."""


class InputError(UserError):
    """The run's input cannot be read as given (a pattern that matches nothing)."""


def pipeline_options(cfg: dict) -> PipelineOptions:
    args = [f"--runner={cfg['runner']}"]
    if cfg["runner"] in LOCAL_RUNNERS:
        workers = int(cfg["workers"])
        mode = "multi_processing" if workers > 1 else "in_memory"
        args += [f"--direct_num_workers={workers}", f"--direct_running_mode={mode}",
                 "--default_sdk_harness_log_level=ERROR"]
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


def _count_elements(pcoll, label: str, key: str):
    return (pcoll | f"{label}Count" >> beam.combiners.Count.Globally()
            | f"{label}Key" >> beam.Map(lambda n, k: (k, n), key))


def run_group(names: list[str], cfg: dict, root: str, upstream: str | None) -> dict[str, dict]:
    """One Beam pipeline for a group of stages; per-stage counters, dropped docs and stats.json.
    `upstream`: the folder under OUT of the documents the group's first stage reads, if it reads any."""
    with beam.Pipeline(options=pipeline_options(cfg)) as p:
        docs = io.read_parquet(p, io.join(root, upstream), "ReadInput") if upstream else None
        out_count = None  # the previous stage's `out` is this stage's `in`: each doc is counted once
        for name in names:
            stage = STAGES[name]
            inputs = docs
            docs, drops, counters = stage.build(p, cfg, inputs, root)
            parts = [counters]
            if stage.counts_itself:  # its DoFn tallies in, out and drops per bundle
                out_count = None
            else:
                parts.append(drops | f"{name}/CountDropped" >> beam.Map(lambda d: (f"dropped/{d['reason']}", 1)))
                if inputs is not None:
                    parts.append(_count_elements(inputs, f"{name}/In", "in") if out_count is None
                                 else out_count | f"{name}/In" >> beam.MapTuple(lambda _, n: ("in", n)))
                out_count = None if docs is None else _count_elements(docs, f"{name}/Out", "out")
                if out_count is not None:
                    parts.append(out_count)
            if cfg["write_dropped"]:
                io.write_parquet(drops, io.join(root, "dropped", name), io.DROP_SCHEMA, f"{name}/WriteDropped")
            (parts | f"{name}/AllCounters" >> beam.Flatten() | f"{name}/Sum" >> beam.CombinePerKey(sum)
             | f"{name}/Collect" >> beam.combiners.ToList()
             | f"{name}/WriteStats" >> beam.Map(_stats_to_json(io.join(root, name))))
        if docs is not None:
            io.write_parquet(docs, io.join(root, STAGES[names[-1]].documents), STAGES[names[-1]].schema, "WriteDocs")
    return {name: io.read_json(io.join(root, name, "stats.json")) for name in names}


@contextlib.contextmanager
def worker_logs_to_file(cfg: dict, root: str, label: str):
    """Local Beam worker processes log at INFO straight to stderr; send fd 2 to OUT/logs/<group>.log
    so the console shows our progress lines, and print the log's tail if the group fails."""
    if cfg["runner"] not in LOCAL_RUNNERS:
        yield
        return
    folder = os.path.join(root, "logs") if "://" not in root else tempfile.mkdtemp(prefix="curate-logs-")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{label}.log")
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as fh:
        os.dup2(fh.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            with open(path, "rb") as log_fh:
                sys.stderr.write(log_fh.read()[-4000:].decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def check_identity(name: str, stats: dict) -> None:
    total = stats["out"] + sum(stats["dropped"].values())
    if stats["in"] != total:
        raise StageInvariantError(f"stage {name}: in={stats['in']} but out + dropped = {total}: {stats}")


def plan_groups(names: list[str]) -> list[list[str]]:
    """The stages in registry order, cut into groups where a stage starts one (or reads the input)."""
    groups: list[list[str]] = []
    for name in names:
        stage = STAGES[name]
        if not groups or stage.starts_group or stage.reads == READS_INPUT:
            groups.append([name])
        else:
            groups[-1].append(name)
    return groups


def check_plan(names: list[str]) -> None:
    """Every stage that reads documents follows one that has them."""
    for before, name in zip([None] + names, names):
        if STAGES[name].reads != READS_INPUT and (before is None or STAGES[before].documents is None):
            raise ConfigError(f"stages: {name} reads the documents of the stage before it, but "
                             f"{'none runs before it' if before is None else before + ' has none'}")


def audited_stages(names: list[str]) -> list[str]:
    """The stages whose rows the loss audit follows: from a stage reading the input through the
    stages fed by it, up to the first that ends a branch (its documents are a final output)."""
    chain: list[str] = []
    for name in names:
        stage = STAGES[name]
        if stage.reads == READS_INPUT:
            chain = [name]
        elif chain:
            chain.append(name)
        if chain and stage.ends_branch:
            return chain
    return []


def match_inputs(patterns: list[str]) -> list[dict]:
    """Every file the input patterns match, once each (a file matched by two patterns is read once),
    sorted by path, with its size and modification time: the read stage's fingerprint covers the
    files themselves, so a new or changed file under an old pattern reruns the run."""
    files = {}
    for pattern in patterns:
        matched = FileSystems.match([pattern])[0].metadata_list
        if not matched:
            raise InputError(f"input {pattern!r} matches no file")
        for meta in matched:
            if meta.path in files:
                log.warning("input %s is matched more than once; it is read once", meta.path)
            files[meta.path] = {"path": meta.path, "size": meta.size_in_bytes,
                                "mtime": getattr(meta, "last_updated_in_seconds", None)}
    return [files[path] for path in sorted(files)]


def describe_input_change(before: list[dict], now: list[dict]) -> str:
    old, new = {f["path"]: f for f in before}, {f["path"]: f for f in now}
    parts = [(label, sorted(paths)) for label, paths in (
        ("added", new.keys() - old.keys()), ("removed", old.keys() - new.keys()),
        ("changed", {p for p in new.keys() & old.keys() if new[p] != old[p]}))]
    return "; ".join(f"{len(paths)} {label} ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})"
                     for label, paths in parts if paths)


def run(cfg: dict, stages: list[str] | None = None, force: bool = False, echo: bool = True) -> dict:
    """Run the configured stages group by group, reusing finished groups whose fingerprints match."""
    root = cfg["output"]
    unknown = [s for s in stages or () if s not in STAGES]
    if unknown:
        raise ConfigError(f"--stages: unknown stages {unknown}; known: {list(STAGES)}")
    names = [s for s in STAGES if cfg["stages"] is None or s in cfg["stages"]]
    check_plan(names)
    cfg = {**cfg, "input_files": match_inputs(cfg["input"])}
    runner = pipeline_options(cfg).view_as(StandardOptions).runner  # options after `--` win
    summary = {"output": root, "input": cfg["input"], "input_files": len(cfg["input_files"]),
               "runner": runner, "workers": cfg["workers"], "stages": []}
    for name in names:
        for notice in STAGES[name].notices(cfg):
            log.warning(notice)
    selected = set(stages or names)
    reader = next((n for n in names if STAGES[n].reads == READS_INPUT), None)  # the first to read the input
    upstream, upstream_fp = None, ""
    for group in plan_groups(names):
        fps = {}
        for name in group:
            reads_input = STAGES[name].reads == READS_INPUT
            fps[name] = upstream_fp = stage_fingerprint(cfg, name, None if reads_input else upstream_fp,
                                                        STAGES[name].settings_from)
        markers = {name: io.read_json(io.join(root, name, "_SUCCESS")) for name in group}
        finished = all(m and m["fingerprint"] == fps[n] for n, m in markers.items())
        label = "+".join(group)
        for name in group:
            marker = markers[name]
            changed = marker and marker.get("input_files") not in (None, cfg["input_files"])
            if changed and STAGES[name].reads == READS_INPUT:
                log.info("stage %s: input files changed since the last run: %s", name,
                         describe_input_change(marker["input_files"], cfg["input_files"]))
        if finished and not (force and selected & set(group)):
            log.info("stages %s: finished earlier with the same config, reused", label)
            results = {n: {**markers[n]["stats"], "reused": True} for n in group}
        elif not selected & set(group):
            raise RuntimeError(f"stages {label} have no finished output for this config; add them to --stages")
        else:
            for name in group:
                for folder in [name, f"dropped/{name}", *STAGES[name].outputs]:
                    io.delete_tree(io.join(root, folder))
            log.info("stages %s: running", label)
            started = time.time()
            reads = STAGES[group[0]].reads != READS_INPUT
            with worker_logs_to_file(cfg, root, label):
                results = run_group(group, cfg, root, upstream if reads else None)
            wall = round(time.time() - started, 2)
            for name in group:
                stats = {**results[name], "wall_s": wall, "group": label}
                check_identity(name, stats)
                marker = {"fingerprint": fps[name], "stats": stats}
                if STAGES[name].reads == READS_INPUT:
                    marker["input_files"] = cfg["input_files"]
                io.write_json(io.join(root, name, "_SUCCESS"), marker)
                results[name] = {**stats, "reused": False}
        summary["stages"] += [{"stage": n, **results[n]} for n in group]
        for name in group:
            if name == reader and not results[name]["reused"] and results[name]["out"] == 0:
                reasons = ", ".join(f"{r}={n}" for r, n in sorted(results[name]["dropped"].items())) or "nothing read"
                log.warning("stage %s: no documents from %d input files (%s): empty, damaged or not WARC/WET?",
                            name, len(cfg["input_files"]), reasons)
        upstream = STAGES[group[-1]].documents
    audited = audited_stages(names)
    if audited and cfg["write_dropped"]:
        with worker_logs_to_file(cfg, root, "audit"):
            summary["audit"] = audit(pipeline_options(cfg), root, audited, STAGES[audited[-1]].documents)
    io.write_json(io.join(root, "stats", "summary.json"), summary)
    if echo:
        print(format_table(summary))
    return summary
