"""The stage contract: what a stage declares, what it returns, and the one registry of stages.

A stage is a class registered once, in the order the run applies stages:

    @register
    class LanguageStage(DocumentStage):
        name = "language"
        config = LanguageConfig      # its config section: a pydantic model, each field with its default and why
        reasons = ("lang_low_confidence", "lang_not_allowed")   # every reason it may drop with
        step = IdentifyLanguage      # a DocumentStep: one document in, the document or a Drop out

What a stage declares (class attributes):
- `name`: its config section, its folder OUT/<name>/ (stats.json, _SUCCESS, its documents when it ends a
  group) and OUT/dropped/<name>/ (every document it dropped);
- `config`: a pydantic model of its section; `load_config` validates every registered section before any
  pipeline is built, and `curate stages` prints them;
- `reasons`: the drop reasons it may give (the `dropped` keys of its stats);
- `reads`: `READS_PREVIOUS` (the documents of the stage before it), `READS_INPUT` (the run's input
  files; its fingerprint covers them) or `READS_OUTPUTS` (only the outputs of the stages
  `reads_outputs_of` names: the shard stage mixes every branch's final documents);
- `starts_group`: it begins a group: the stages before it write their documents (Parquet) and a
  completion marker, so that a rerun with the same config and input resumes here, reading them back
  (a run is one Beam pipeline; within it the documents also flow on directly);
- `documents`: the folder under OUT its documents are in for the stages after it (default: its name;
  None: it has no documents output); `schema`: their Parquet schema;
- `outputs`: other folders under OUT it writes, cleared before it reruns;
- `ends_branch`: its documents are a final output; the loss audit follows every row read to here;
- `counts_file_rows`: it reads the input and writes OUT/<name>/file_rows.json, the rows it emitted per
  input file: the loss audit starts at such a stage;
- `settings_from`: other config sections its output depends on (its fingerprint covers them);
- `reads_outputs_of(cfg)`: stages whose `outputs` it reads besides its documents (the pairs branch
  reads the interleaved stages' recycling candidates): their groups run (or are reused) with it, its
  fingerprint covers theirs, and `writes_of(p, stage)` gives the writes to wait for (`io.after`).

What a stage is given: `build(p, cfg, docs, root)` gets the validated run config (attribute access, its
own section at `getattr(cfg, name)`), and a `DocumentStage`'s step its own section's model; what the runner
decided for the pipeline (the matched input files, the stages built in it) is `plan_of(p)`.

What a stage returns: `build(p, cfg, docs, root)` returns `Built(docs, drops, counters, written)`: its
documents (or None), its drop rows (one shape: `drop_row`, the io.DROP_SCHEMA row; a PCollection, or a
tuple of them, each then written in the stage that makes it), counters, (key, n)
pairs, and `written`: the PCollections of the writes it makes itself (its `outputs`), whose completion
means those outputs are in place. The runner writes the drops to OUT/dropped/<name>/ (with
`write_dropped`), sums the counters into OUT/<name>/stats.json, writes the group's completion marker
once all of that and `written` are done, and fails the run unless in = out + Σ dropped. A `DocumentStage` counts `in`, `out`
and `dropped/<reason>` itself (in its DoFn, per bundle); any other stage has its `in` counted from its
input, its `out` from its documents (or a counter it emits) and its drops from its drop rows.

Adding a stage: its module (the class above, its config model, its DoFn) and one `register` line, here or
in the module that defines it; the runner never names a stage.
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
from pydantic import BaseModel, ConfigDict

from pipelines import beam_overhead, io

LOCAL_RUNNERS = frozenset({"FnApiRunner", "DirectRunner"})  # the runners that run on this machine

beam_overhead.apply_in_local_workers()  # every stage module imports this one, so each worker does

DROPPED = "dropped"
COUNTERS = "counters"
READS_INPUT, READS_PREVIOUS, READS_OUTPUTS = "input", "previous", "outputs"


class Section(BaseModel):
    """A config section: unknown keys are refused. With no fields: the section of a stage without settings."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Drop:
    """A per-document step's verdict that the document goes: why (a reason code of the stage's
    `reasons`), a human-readable detail, and the document as it was dropped (its measured scores
    included); None = the document as it came in."""

    reason: str
    detail: str = ""
    doc: dict | None = None


def scores_of(doc: dict) -> dict:
    """A document's scores as a dict (Parquet gives a map column back as (key, value) pairs)."""
    return dict(doc.get("scores") or ())


def with_scores(doc: dict, **values) -> dict:
    """The document with `values` added to its scores (keys sorted: the same bytes for the same values)."""
    scores = scores_of(doc)
    scores.update(values)
    return {**doc, "scores": dict(sorted(scores.items()))}


def drop_row(doc: dict, stage: str, reason: str, detail: str = "", text: str | None = None) -> dict:
    """The one shape of a dropped document (io.DROP_SCHEMA): provenance, stage, reason, detail,
    scores and text (None: the document's own)."""
    row = {k: doc.get(k) for k in ("id", "url", "warc_file", "warc_offset", "warc_date")}
    row.update(stage=stage, reason=reason, detail=detail, scores=scores_of(doc),
               text=text if text is not None else doc.get("text"))
    return row


def dropped(row: dict) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(DROPPED, row)


def counter(key: str, n: int = 1) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(COUNTERS, (key, n))


def _in_global_window(value):
    """An output emitted from finish_bundle, which must carry its own window (the pipeline is batch)."""
    if isinstance(value, beam.pvalue.TaggedOutput):
        return beam.pvalue.TaggedOutput(value.tag, WindowedValue(value.value, MIN_TIMESTAMP, [GlobalWindow()]))
    return WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])


class Built(NamedTuple):
    """What `Stage.build` returns (see the module docstring)."""

    docs: beam.PCollection | None
    drops: beam.PCollection | tuple  # one PCollection of drop rows, or several (each written where it is made)
    counters: beam.PCollection
    written: tuple = ()


class Tallying(beam.DoFn):
    """Base of the DoFns that count what they do per element: `self.count(key, n)` adds to the bundle's
    tally, which finish_bundle emits as one counter per key. A counter output per element would cross
    to the runner and through the counters' Flatten and combine one element at a time (several per page);
    a tally is a dict increment, and bundle outputs commit together, so a retried bundle counts once.
    A subclass with its own start_bundle or finish_bundle calls these."""

    def start_bundle(self):
        self._tally = Counter()

    def count(self, key: str, n: int = 1) -> None:
        self._tally[key] += n

    def finish_bundle(self):
        for key, n in self._tally.items():
            yield _in_global_window(counter(key, n))


class DocumentStep(Tallying):
    """Base of the per-document steps: `step(doc)` returns the kept document or a `Drop`; extra
    counters go through `self.count(key, n)`. The base tallies each bundle's `in`, `out`,
    `dropped/<reason>` and extra counters (Tallying), and turns every Drop into a drop row.

    With `batch` > 1 documents are buffered and stepped `batch` at a time, back to back, after one
    `prepare(batch)` call (batched model calls; native code that runs faster with nothing in between).
    Models load in `setup()`, once per worker."""

    batch = 1

    def __init__(self, stage: str, cfg: BaseModel):
        self.stage, self.cfg = stage, cfg

    def start_bundle(self):
        super().start_bundle()
        self._buffer = []

    def process(self, doc):
        if self.batch <= 1:
            yield self._step_counted(doc)
            return
        self._buffer.append(doc)
        if len(self._buffer) >= self.batch:
            yield from self._drain()

    def _drain(self):
        buffer, self._buffer = self._buffer, []
        if buffer:
            self.prepare(buffer)
        # every document stepped before any goes on: yielded one by one, each would run through the
        # steps fused after this one before the next is stepped, and this step's tables leave the caches
        yield from [self._step_counted(doc) for doc in buffer]

    def _step_counted(self, doc):
        self._tally["in"] += 1
        out = self.step(doc)
        if isinstance(out, Drop):
            self._tally[f"dropped/{out.reason}"] += 1
            return dropped(drop_row(doc if out.doc is None else out.doc, self.stage, out.reason, out.detail))
        self._tally["out"] += 1
        return out

    def finish_bundle(self):
        for out in self._drain():
            yield _in_global_window(out)
        yield from super().finish_bundle()

    def prepare(self, docs: list[dict]) -> None:
        """Called with each batch before its documents are stepped."""

    def step(self, doc: dict) -> dict | Drop:
        raise NotImplementedError


class Stage:
    """Base of every stage; see the module docstring for what each attribute means."""

    name: str
    config: type[BaseModel] = Section
    reasons: tuple[str, ...] = ()
    reads = READS_PREVIOUS
    starts_group = False
    schema = io.DOC_SCHEMA
    outputs: tuple[str, ...] = ()
    ends_branch = False
    counts_file_rows = False
    settings_from: tuple[str, ...] = ()
    counts_itself = False

    @property
    def documents(self) -> str | None:
        return self.name

    def reads_outputs_of(self, cfg: BaseModel) -> tuple[str, ...]:
        return ()

    def build(self, p, cfg: BaseModel, docs, root: str):
        raise NotImplementedError

    def notices(self, cfg: BaseModel) -> list[str]:
        """Warnings to log before a run that includes this stage."""
        return []


class DocumentStage(Stage):
    """A stage that is one DocumentStep over documents, built with its config section."""

    step: type[DocumentStep]
    counts_itself = True

    def build(self, p, cfg, docs, root):
        res = docs | self.name >> beam.ParDo(self.step(self.name, getattr(cfg, self.name))).with_outputs(
            DROPPED, COUNTERS, main="docs")
        return Built(res.docs, res[DROPPED], res[COUNTERS])


STAGES: dict[str, Stage] = {}
_WRITES: "weakref.WeakKeyDictionary[beam.Pipeline, dict]" = weakref.WeakKeyDictionary()
_PLANS: "weakref.WeakKeyDictionary[beam.Pipeline, RunPlan]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class RunPlan:
    """What the runner decided for one pipeline, beside the config the user gave: the input files it
    reads (matched once: path, size, mtime), the stages built in it (stages may share work:
    stages.image_pages), and the folder its readers report progress to (None: no progress). Kept
    apart from the config, so that the config stays what was validated and what is fingerprinted."""

    input_files: list[dict]
    stages_built: frozenset[str] = frozenset()
    progress_dir: str | None = None


def set_plan(p, plan: RunPlan) -> None:
    """The runner records its plan for pipeline `p` before it adds any stage."""
    _PLANS[p] = plan


def plan_of(p) -> RunPlan:
    return _PLANS[p]


def note_writes(p, names: list[str], writes: list) -> None:
    """The runner records each group's writes as it adds the group to pipeline `p`."""
    for name in names:
        _WRITES.setdefault(p, {})[name] = list(writes)


def writes_of(p, name: str) -> list:
    """The writes of stage `name`'s group in pipeline `p`; none if the group finished in an earlier run."""
    return _WRITES.get(p, {}).get(name, [])


def register(cls: type[Stage], after: str | None = None) -> type[Stage]:
    """Add a stage to the run order: last, or right after the stage `after`. Usable as a decorator."""
    stage = cls()
    if stage.name in STAGES:
        raise ValueError(f"stage {stage.name!r} is registered twice")
    if after is None:
        STAGES[stage.name] = stage
    else:
        items = list(STAGES.items())
        at = [n for n, _ in items].index(after) + 1
        items.insert(at, (stage.name, stage))
        STAGES.clear()
        STAGES.update(items)
    return cls


def unregister(name: str) -> None:
    del STAGES[name]
