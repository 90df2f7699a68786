"""Stage orchestration: one Beam pipeline per run for every group of stages not finished earlier,
completion markers, resume, per-stage stats, the loss audit.
Which stages exist, in which order, what each reads and writes, comes from the registry
(pipelines/stage.py); nothing here names a stage.

OUT/<stage>/        the stage's documents (Parquet) if it ends a group, stats.json and _SUCCESS (with the
                    stage fingerprint, written inside the pipeline once the group's outputs are all
                    written: a run killed later resumes after that group)
OUT/dropped/<stage> every dropped document with stage, reason, detail and scores (if write_dropped)
OUT/docs/text       final documents; OUT/docs/pdf: PDF responses for the interleaved branch
OUT/stats/summary.json  per stage: in, out, dropped {reason: n}, extra counters, done_s; the pipeline's wall_s
OUT/stats/audit.json    the loss audit of the rows read, through to the final documents (pipelines/audit.py)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, TestOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

from pipelines import beam_overhead, io
from pipelines.audit import add_audit, audit_report
from pipelines.config import ConfigError, UserError, stage_fingerprint
from pipelines.stage import (COUNTERS, LOCAL_RUNNERS, READS_INPUT, READS_PREVIOUS, RunPlan, Tallying, note_writes,
                             set_plan)
from pipelines.registry import STAGES
from pipelines.progress import Progress
from pipelines.stats import format_table, stage_costs, transform_msecs

log = logging.getLogger("curate")


class StageInvariantError(RuntimeError):
    """in != out + Σ dropped: a record was lost or duplicated. Always a bug, never data."""


class InputError(UserError):
    """The run's input cannot be read as given (a pattern that matches nothing)."""


AUTO_BYTES_PER_WORKER = 32 << 20


def local_workers(workers: int | str, input_bytes: int) -> int:
    """`workers`, or for "auto" one worker per AUTO_BYTES_PER_WORKER of input, at most one per core. On
    2 cores (benchmarks/end_to_end.py, docs/design.md "Runners"): a second local worker made the whole run slower
    on the 9 MB sample (40.1 s vs 30.0 s) and on mixed-dev's 17 MB (text branch 18.0 vs 15.6 s), and
    1.16-1.33x faster at ~90 MB: each of the ~420 fused stages costs a worker round trip, and the
    runner process serves every worker's data from one core."""
    if workers != "auto":
        return int(workers)
    return max(1, min(os.cpu_count() or 1, input_bytes // AUTO_BYTES_PER_WORKER))


# What `make engines` builds (build/engines/): Prism from the Go module proxy at the pinned Beam version,
# and Beam's Spark and Flink job servers from Maven Central's jars (configs/engines/*.pom.xml).
ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = os.path.join(ROOT_DIR, "build", "engines")
ENGINE_BINARIES = {
    "PrismRunner": ("prism_location", os.path.join(ENGINES, "prism")),
    "SparkRunner": ("spark_job_server_jar", os.path.join(ENGINES, "spark", "beam-runners-spark-3-job-server-2.62.0.jar")),
    "FlinkRunner": ("flink_job_server_jar", os.path.join(ENGINES, "flink", "beam-runners-flink-1.19-job-server-2.62.0.jar")),
}
# What the job-server runners need for this graph (docs/design.md, "Runners"). Every one: a job-server
# timeout longer than a run, since Beam's Python client applies it to the whole job-state stream (the
# default, 300 s, fails any job that runs longer: apache/beam issue 35867). Flink: streaming mode,
# since the batch (DataSet) optimizer's union traversal does not finish on a graph of this size;
# network buffers for the ~200 tasks streaming mode deploys at once (configs/engines/flink/); and a
# deeper job-server thread stack for the job graph's recursive translation.
JOB_TIMEOUT = ("job_server_timeout", str(30 * 24 * 3600))
ENGINE_OPTIONS = {
    "PrismRunner": [JOB_TIMEOUT],
    "SparkRunner": [JOB_TIMEOUT],
    "FlinkRunner": [JOB_TIMEOUT, ("flink_conf_dir", os.path.join(ROOT_DIR, "configs", "engines", "flink")),
                    ("job_server_jvm_properties", "-Xss16m"), ("streaming", None)],
}


def engine_args(runner: str, user_args: list[str]) -> list[str]:
    """The engine options `curate run` adds for `runner` unless the user names them: the local binary
    `make engines` built (without it Beam downloads Prism or a job-server jar at run time), and the
    settings the engine needs for this graph."""
    option, path = ENGINE_BINARIES.get(runner, (None, None))
    wanted = [(option, path)] if option is not None and os.path.exists(path) else []
    args = []
    for option, value in wanted + ENGINE_OPTIONS.get(runner, []):
        if not any(a == f"--{option}" or a.startswith(f"--{option}=") for a in user_args):
            args.append(f"--{option}" if value is None else f"--{option}={value}")
    return args


def pipeline_options(cfg) -> PipelineOptions:
    # Beam's construction-time type check costs ~40% of building the graph (about 4 of 10 s for the
    # whole run, ~1,800 transforms) and has nothing to check: no transform here declares type hints.
    args = [f"--runner={cfg.runner}", "--no_pipeline_type_check"]
    if cfg.runner in LOCAL_RUNNERS:
        workers = int(cfg.workers)
        mode = "multi_processing" if workers > 1 else "in_memory"
        args += [f"--direct_num_workers={workers}", f"--direct_running_mode={mode}",
                 "--default_sdk_harness_log_level=ERROR"]
    runner = PipelineOptions(args + list(cfg.beam_args)).view_as(StandardOptions).runner
    return PipelineOptions(args + engine_args(runner, cfg.beam_args) + list(cfg.beam_args))  # user's last


def _write_stats(root: str, names: list[str]):
    """((stage, key), n) sums of a group -> OUT/<stage>/stats.json for each stage; returns {stage: stats}."""
    def write(sums):
        by_stage = {name: {"in": 0, "out": 0, "dropped": {}, "extra": {}} for name in names}
        for (name, key), n in sorted(sums):
            stats = by_stage[name]
            if key in ("in", "out"):
                stats[key] += n
            elif key.startswith("dropped/"):
                stats["dropped"][key[len("dropped/"):]] = n
            else:
                stats["extra"][key] = n
        for name in names:
            io.write_json(io.join(root, name, "stats.json"), by_stage[name])
        return by_stage
    return write


class _TallyElements(Tallying):
    """Each element counted under `key`, or a drop row under `dropped/<its reason>` (key None): (key, n) once
    per bundle (Tallying), summed by the group's one combine of its counters. A (key, 1) per element
    crossed to the runner and through the group's Flatten and combine one element at a time."""

    def __init__(self, key: str | None = None):
        self.key = key

    def process(self, element):
        self.count(self.key or f"dropped/{element['reason']}")


def _count_elements(pcoll, label: str, key: str | None = None):
    """(key, n) per bundle of `pcoll` (_TallyElements), not a GroupByKey of its own."""
    return (pcoll | f"{label}Count" >> beam.ParDo(_TallyElements(key)).with_outputs(COUNTERS, main="none"))[COUNTERS]


class SumCounters(beam.CombineFn):
    """((stage, key), n) pairs -> their sums per (stage, key), sorted: a group's stats in one combine."""

    def create_accumulator(self):
        return {}

    def add_input(self, sums, counter):
        key, n = counter
        sums[key] = sums.get(key, 0) + n
        return sums

    def merge_accumulators(self, accumulators):
        merged = {}
        for sums in accumulators:
            for key, n in sums.items():
                merged[key] = merged.get(key, 0) + n
        return merged

    def extract_output(self, sums):
        return sorted(sums.items())


def holds_identity(stats: dict) -> bool:
    return stats["in"] == stats["out"] + sum(stats["dropped"].values())


class _MarkGroup(beam.DoFn):
    """Writes each stage's completion marker (fingerprint, stats, the input files it read) once the
    group's stats and every write of the group are complete (side inputs), `done_s` after the run's
    pipeline started. A stage whose stats break in = out + Σ dropped gets no marker: the run fails
    on it after the pipeline, and a rerun redoes it."""

    def __init__(self, root: str, names: list[str], markers: dict, started: float):
        self.root, self.names, self.markers, self.started = root, names, markers, started

    def process(self, _, by_stage, *writes):
        label, done = "+".join(self.names), round(time.time() - self.started, 2)
        for name in self.names:
            stats = by_stage[name]
            if holds_identity(stats):
                marker = {**self.markers[name], "stats": {**stats, "group": label, "done_s": done}}
                io.write_json(io.join(self.root, name, "_SUCCESS"), marker)


def drops_of(built) -> tuple:
    """A stage's drop rows as a tuple of PCollections (`Built.drops` is one, or a tuple of several)."""
    return built.drops if isinstance(built.drops, tuple) else (built.drops,)


def build_group(p, names: list[str], cfg, root: str, docs, markers: dict, started: float,
                labels: dict | None = None):
    """Adds a group of stages to pipeline `p`: per-stage counters, dropped docs and stats.json, the
    group's documents (Parquet) and its completion markers. `docs`: the documents the first stage
    reads (None if it reads the input). Returns (the last stage's documents PCollection or None,
    the group's writes). `labels`, if given, gets each stage's transform labels (the group's writes,
    stats and markers are the last stage's): what its cost is summed over."""
    out_count = None  # the previous stage's `out` is this stage's `in`: each doc is counted once
    writes, counters, drops = [], [], []
    labels = {} if labels is None else labels
    before = set(p.applied_labels)
    for name in names:
        stage = STAGES[name]
        inputs = docs
        built = stage.build(p, cfg, inputs, root)
        docs = built.docs
        parts = [built.counters]
        if stage.counts_itself:  # its DoFn tallies in, out and drops per bundle
            out_count = None
        else:
            parts += [_count_elements(d, f"{name}/Dropped{i}") for i, d in enumerate(drops_of(built))]
            if inputs is not None:
                parts.append(_count_elements(inputs, f"{name}/In", "in") if out_count is None
                             else out_count | f"{name}/In" >> beam.MapTuple(lambda _, n: ("in", n)))
            out_count = None if docs is None else _count_elements(docs, f"{name}/Out", "out")
            if out_count is not None:
                parts.append(out_count)
        counters.append(parts | f"{name}/AllCounters" >> beam.Flatten()
                        | f"{name}/ByStage" >> beam.Map(lambda kn, stage: ((stage, kn[0]), kn[1]), name))
        if cfg.write_dropped:
            drops += [d | f"{name}/DropFolder{i}" >> beam.Map(lambda row, folder: (folder, row),
                                                             io.join(root, "dropped", name))
                      for i, d in enumerate(drops_of(built))]
        writes += built.written
        labels[name], before = set(p.applied_labels) - before, set(p.applied_labels)
    last = STAGES[names[-1]]
    if drops:
        writes.append(io.write_parquet_folders(drops, [io.join(root, "dropped", n) for n in names], io.DROP_SCHEMA,
                                               f"{last.name}/WriteDropped"))
    if docs is not None:
        writes.append(io.write_parquet(docs, io.join(root, last.documents), last.schema, f"{last.name}/WriteDocs"))
    stats = (counters | f"{last.name}/GroupCounters" >> beam.Flatten()
             | f"{last.name}/Sum" >> beam.CombineGlobally(SumCounters())
             | f"{last.name}/WriteStats" >> beam.Map(_write_stats(root, names)))
    (p | f"{last.name}/Done" >> beam.Create([None])
     | f"{last.name}/Mark" >> beam.ParDo(_MarkGroup(root, names, markers, started), beam.pvalue.AsSingleton(stats),
                                         *[beam.pvalue.AsList(w) for w in writes]))
    labels[last.name] |= set(p.applied_labels) - before
    return docs, writes


@contextlib.contextmanager
def worker_logs_to_file(cfg, root: str, label: str):
    """Local Beam worker processes log at INFO straight to stderr; send fd 2 to OUT/logs/<group>.log
    so the console shows our progress lines, and print the log's tail if the group fails."""
    if cfg.runner not in LOCAL_RUNNERS:
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
    if not holds_identity(stats):
        total = stats["out"] + sum(stats["dropped"].values())
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
        if STAGES[name].reads == READS_PREVIOUS and (before is None or STAGES[before].documents is None):
            raise ConfigError(f"stages: {name} reads the documents of the stage before it, but "
                             f"{'none runs before it' if before is None else before + ' has none'}")


def _needed_groups(groups: list[list[str]], selected: set, cfg) -> list[bool]:
    """Which groups a run of the `selected` stages needs: the groups holding them, the groups before
    each of those back to the one that reads the input, and the groups of the stages whose outputs a
    needed stage reads (`reads_outputs_of`), with theirs; repeated until nothing is added."""
    index = {name: i for i, group in enumerate(groups) for name in group}
    needed = [False] * len(groups)
    todo = [index[n] for n in selected if n in index]
    while todo:
        i = todo.pop()
        if needed[i]:
            continue
        needed[i] = True
        if STAGES[groups[i][0]].reads == READS_PREVIOUS and i > 0:
            todo.append(i - 1)
        todo += [index[n] for name in groups[i] for n in STAGES[name].reads_outputs_of(cfg) if n in index]
    return needed


def audited_stages(names: list[str]) -> list[str]:
    """The stages whose rows the loss audit follows: from a stage that reads the input and counts the
    rows it emits per file through the stages fed by it, up to the first that ends a branch (its
    documents are a final output)."""
    chain: list[str] = []
    for name in names:
        stage = STAGES[name]
        if stage.reads == READS_INPUT:
            chain = [name] if stage.counts_file_rows else []
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


def _upstream_docs(p, root: str, folder: str, built_here: bool, previous, writes: list, label: str):
    """The documents a group reads: the previous group's PCollection when it ran in this pipeline
    and passes one on; its Parquet output read back once written when it ran here but its documents
    are written by the stage itself (the final text documents); else its output of an earlier run."""
    if built_here and previous is not None:
        return previous
    pattern = io.join(root, folder, "part*.parquet")
    return (io.after(p, pattern, writes if built_here else [], f"{label}/Pattern")
            | f"{label}/Read" >> beam.io.ReadAllFromParquet())


def _dry_run_summary(summary: dict, graph, runner, echo: bool) -> dict:
    """What a dry run checked: the graph's size and, where the runner translated it (DataflowRunner:
    the job it would submit), the translated pipeline's size and what its workers would be given
    (container image, staged files such as this package's sdist from --setup_file)."""
    translated = getattr(runner, "proto_pipeline", None)
    summary = {**summary, "dry_run": True, "transforms": sum(not t.subtransforms for t in graph.components.transforms.values())}
    if translated is not None:
        envs = translated.components.environments.values()
        summary["translated_bytes"] = translated.ByteSize()
        summary["worker_images"] = sorted({beam_runner_api_pb2.DockerPayload.FromString(e.payload).container_image
                                           for e in envs if e.urn == common_urns.environments.DOCKER.urn})
        summary["staged_files"] = sorted({beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(a.role_payload).staged_name
                                          for e in envs for a in e.dependencies
                                          if a.role_urn == common_urns.artifact_roles.STAGING_TO.urn})
    if echo:
        made = ""
        if translated is not None:
            made = (f"; translated: {summary['translated_bytes']:,} bytes, workers {', '.join(summary['worker_images'])}"
                    f" given {', '.join(summary['staged_files']) or 'no staged files'}")
        print(f"dry run: {summary['runner']} took the graph ({summary['transforms']:,} transforms{made}); "
              "nothing was submitted, read or written")
    return summary


def run(cfg, stages: list[str] | None = None, force: bool = False, echo: bool = True,
        progress: bool = True) -> dict:
    """Run the configured stages (`cfg`: the validated run config, `config.load_config`) as one Beam
    pipeline, reusing finished groups whose fingerprints match. `progress`: on a local runner with a
    local output folder, print bytes read, an ETA and each finished group while it runs
    (pipelines/progress.py)."""
    root = cfg.output
    unknown = [s for s in stages or () if s not in STAGES]
    if unknown:
        raise ConfigError(f"--stages: unknown stages {unknown}; known: {list(STAGES)}")
    names = [s for s in STAGES if cfg.stages is None or s in cfg.stages]
    check_plan(names)
    # Beam's --dry_run: build the whole graph and hand it to the runner, which translates it (Dataflow:
    # the job request, offline) and submits nothing; the input is not listed, the output not touched
    asked = PipelineOptions([f"--runner={cfg.runner}", *cfg.beam_args])
    dry_run = asked.view_as(TestOptions).dry_run
    if dry_run and asked.view_as(StandardOptions).runner != "DataflowRunner":
        raise UserError("--dry_run: only DataflowRunner translates a job without running it; other runners would run it")
    files = [{"path": p, "size": 0, "mtime": None} for p in cfg.input] if dry_run else match_inputs(cfg.input)
    cfg = cfg.model_copy(update={"workers": local_workers(cfg.workers, sum(f["size"] for f in files))})
    options = pipeline_options(cfg)
    runner = options.view_as(StandardOptions).runner  # options after `--` win
    summary = {"output": root, "input": cfg.input, "input_files": len(files),
               "runner": runner, "workers": cfg.workers, "stages": []}
    for name in names:
        for notice in STAGES[name].notices(cfg):
            log.warning(notice)
    selected = set(stages or names)

    # plan: which groups are finished with this config and input, which run, which no selected stage needs
    groups = plan_groups(names)
    needed = _needed_groups(groups, selected, cfg)
    plan, upstream_fp, skipped, fingerprints = [], "", [], {}
    for index, group in enumerate(groups):
        markers = {}
        for name in group:
            reads_input = STAGES[name].reads == READS_INPUT
            side = {n: fingerprints[n] for n in STAGES[name].reads_outputs_of(cfg)}
            upstream_fp = stage_fingerprint(cfg, name, None if reads_input else
                                            upstream_fp if STAGES[name].reads == READS_PREVIOUS else "",
                                            STAGES[name].settings_from, side, files)
            fingerprints[name] = upstream_fp
            markers[name] = {"fingerprint": upstream_fp, **({"input_files": files} if reads_input else {})}
        found = {name: None if dry_run else io.read_json(io.join(root, name, "_SUCCESS")) for name in group}
        for name in group:
            changed = found[name] and found[name].get("input_files") not in (None, files)
            if changed and STAGES[name].reads == READS_INPUT:
                log.info("stage %s: input files changed since the last run: %s", name,
                         describe_input_change(found[name]["input_files"], files))
        label = "+".join(group)
        finished = all(m and m["fingerprint"] == markers[n]["fingerprint"] for n, m in found.items())
        if finished and not (force and selected & set(group)):
            log.info("stages %s: finished earlier with the same config, reused", label)
            plan.append((group, markers, {n: {**found[n]["stats"], "reused": True} for n in group}))
        elif not selected & set(group) and not needed[index]:
            log.info("stages %s: not run (no stage selected with --stages needs them)", label)
            skipped += group
        elif not selected & set(group):
            raise UserError(f"stages {label} have no finished output for this config, and the stages selected "
                            f"after them need it; add them to --stages")
        else:
            plan.append((group, markers, None))

    audited = audited_stages([n for n in names if n not in skipped])
    audit_path = io.join(root, "stats", "audit.json")
    runs_audited = any(results is None and set(group) & set(audited) for group, _, results in plan)
    if runs_audited and not dry_run:
        io.delete_tree(audit_path)
    with_audit = bool(audited) and cfg.write_dropped and (runs_audited or dry_run or not FileSystems.exists(audit_path))
    to_run = [group for group, _, results in plan if results is None]
    run_plan = RunPlan(files, frozenset(name for group in to_run for name in group))
    msecs, stage_labels = {}, {}
    if not dry_run:
        for name in (name for group in to_run for name in group):
            for folder in [name, f"dropped/{name}", *STAGES[name].outputs]:
                io.delete_tree(io.join(root, folder))
    if to_run or with_audit:
        log.info("running %s in one pipeline (%s, %s worker(s))",
                 ", ".join("+".join(g) for g in to_run) + (" and the loss audit" if with_audit else ""),
                 runner, cfg.workers)
        started = time.time()
        watch = contextlib.nullcontext()
        if progress and runner in LOCAL_RUNNERS and "://" not in root:
            run_plan = dataclasses.replace(run_plan, progress_dir=os.path.join(root, "logs", "progress"))
            io.delete_tree(run_plan.progress_dir)
            watch = Progress(run_plan.progress_dir, sum(f["size"] for f in files), len(files),
                             {"+".join(g): [io.join(root, n, "_SUCCESS") for n in g] for g in to_run},
                             console=os.dup(2), tty=os.isatty(2))
        direct = options.view_as(DirectOptions)
        processes = direct.direct_num_workers if direct.direct_running_mode == "multi_processing" else 0
        if processes and runner in LOCAL_RUNNERS and "pack" in run_plan.stages_built:
            from packing.transforms import tokenizer_info

            tokenizer_info(cfg.pack)  # the driver's manifests need it: loaded before the workers fork, theirs too
        local = (beam_overhead.local_run(cfg.stage_cost, standby=processes) if runner in LOCAL_RUNNERS
                 else contextlib.nullcontext())
        # `local` before `watch`: its worker processes are forked before the progress thread starts
        with worker_logs_to_file(cfg, root, "run"), local, watch, beam.Pipeline(options=options) as p:
            set_plan(p, run_plan)
            previous, writes, built_here, audit_ready = None, [], False, []
            upstream = None  # the folder of the documents the previous group passes on
            for group, markers, results in plan:
                first = STAGES[group[0]]
                if results is None:
                    docs = None
                    if first.reads == READS_PREVIOUS:
                        docs = _upstream_docs(p, root, upstream, built_here, previous, writes, f"{first.name}/Input")
                    previous, writes = build_group(p, group, cfg, root, docs, markers, started, stage_labels)
                    note_writes(p, group, writes)
                    built_here = True
                    if set(group) & set(audited):
                        audit_ready += writes
                else:
                    previous, writes, built_here = None, [], False
                upstream = STAGES[group[-1]].documents
            if with_audit:
                add_audit(p, root, audited, STAGES[audited[-1]].documents, audit_ready)
            graph = p.to_runner_api() if dry_run else None
            if runner in LOCAL_RUNNERS:
                beam_overhead.graph_built()
        summary["wall_s"] = round(time.time() - started, 2)
        msecs = transform_msecs(p.result) if cfg.stage_cost and not dry_run else {}
    if dry_run:
        return _dry_run_summary(summary, graph, p.runner, echo)
    reader = next((n for n in names if STAGES[n].reads == READS_INPUT), None)  # the first to read the input
    for group, markers, results in plan:
        if results is None:
            results = {}
            for name in group:
                marker = io.read_json(io.join(root, name, "_SUCCESS"))
                if marker is None:  # no marker: the identity failed
                    check_identity(name, io.read_json(io.join(root, name, "stats.json")))
                results[name] = {**marker["stats"], "reused": False}
            if reader in group and results[reader]["out"] == 0:
                reasons = ", ".join(f"{r}={n}" for r, n in sorted(results[reader]["dropped"].items())) or "nothing read"
                log.warning("stage %s: no documents from %d input files (%s): empty, damaged or not WARC/WET?",
                            reader, len(files), reasons)
        summary["stages"] += [{"stage": n, **results[n]} for n in group]
    if msecs:
        read = next((s["out"] for s in summary["stages"] if s["stage"] == reader and not s["reused"]), 0)
        summary["cost"] = stage_costs(msecs, stage_labels, read, summary["wall_s"] * cfg.workers)
    if audited and cfg.write_dropped:
        summary["audit"] = audit_report(root)
    # the config the run was made with and the files it read, for `curate report` (which reads it back
    # from here; a Python callable, e.g. a survivor rule, as its repr)
    saved = {**cfg.model_dump(), "input_files": files}
    with FileSystems.create(io.join(root, "stats", "config.json")) as fh:
        fh.write(json.dumps(saved, indent=2, sort_keys=True, default=repr).encode("utf-8"))
    if cfg.report:
        from pipelines.report import write_report

        summary["report"] = io.join(root, "report.html")
        write_report(root, saved, summary=summary)
    io.write_json(io.join(root, "stats", "summary.json"), summary)
    if echo:
        print(format_table(summary))
        if cfg.report:
            print(f"\nreport: {summary['report']} (and report.md beside it)")
    return summary
