"""Stage I/O: Parquet schemas, the deterministic sharded writer, and small filesystem helpers.

All paths go through Beam's FileSystems, so OUT may be local, gs:// or s3://.
"""

from __future__ import annotations

import io
import json
import uuid

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

PROVENANCE = [("id", pa.string()), ("url", pa.string()), ("warc_file", pa.string()),
              ("warc_offset", pa.int64()), ("warc_date", pa.string())]

# read -> extract: the raw payload (HTML bytes, or WET text bytes).
RAW_SCHEMA = pa.schema(PROVENANCE + [("source", pa.string()), ("content_type", pa.string()),
                                     ("http_charset", pa.string()), ("payload", pa.binary())])
PDF_SCHEMA = pa.schema(PROVENANCE + [("payload", pa.binary())])
# Every value a stage measured on a document, by name: a Parquet map, so that DuckDB reads
# `scores['gopher_word_count']` and pandas/pyarrow a list of (name, value) pairs, no JSON to decode.
SCORES = pa.map_(pa.string(), pa.float64())
# extract onwards: one text document.
DOC_SCHEMA = pa.schema(PROVENANCE + [("charset", pa.string()), ("lang", pa.string()),
                                     ("lang_score", pa.float64()), ("scores", SCORES),
                                     ("text", pa.string())])
DROP_SCHEMA = pa.schema(PROVENANCE + [("stage", pa.string()), ("reason", pa.string()),
                                      ("detail", pa.string()), ("scores", SCORES),
                                      ("text", pa.string())])


def join(*parts: str) -> str:
    return FileSystems.join(*parts)


def delete_tree(path: str) -> None:
    if FileSystems.exists(path):
        FileSystems.delete([path])


def local_copy(path: str | None, sidecars: tuple[str, ...] = ()) -> str | None:
    """A model file as a local path, for libraries that only open local files (fastText, GGUF): a
    remote one (gs://, s3://) is copied once into a temporary folder under its own name, with the files
    beside it that have the same stem and a `sidecars` suffix. Local paths and None pass unchanged."""
    if path is None or "://" not in path:
        return path
    import os
    import posixpath
    import tempfile

    folder = tempfile.mkdtemp(prefix="curate-model-")
    stem, _ = posixpath.splitext(path)
    for source in [path] + [stem + suffix for suffix in sidecars]:
        if source != path and not FileSystems.exists(source):
            continue
        with FileSystems.open(source) as src, open(os.path.join(folder, posixpath.basename(source)), "wb") as out:
            out.write(src.read())
    return os.path.join(folder, posixpath.basename(path))


def read_json(path: str) -> dict | None:
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as fh:
        return json.loads(fh.read().decode("utf-8"))


def write_json(path: str, obj) -> None:
    with FileSystems.create(path) as fh:
        fh.write(json.dumps(obj, indent=2, sort_keys=True).encode("utf-8"))


def parquet_bytes(rows: list[dict], schema: pa.Schema, compression: str = "zstd", row_group_size: int = 10_000) -> bytes:
    """One Parquet file as bytes; same rows in the same order give the same bytes. Final outputs use
    zstd (smallest); stage-to-stage scratch files, read once, use snappy (a third of zstd's CPU)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression, row_group_size=row_group_size)
    return buf.getvalue()


def shard_of(doc_id: str, shards: int) -> int:
    return int(doc_id[:8], 16) % shards


DUPLICATE_IDS = "duplicate_ids"


def _provenance_order(row: dict):
    return row["id"], row.get("warc_file") or "", row.get("warc_offset") or 0


class _WriteShard(beam.DoFn):
    """Writes one shard, sorted by id; with `unique_ids`, a row whose id an earlier row of the shard
    has (every copy of an id lands in the same shard) goes to DUPLICATE_IDS as (row, kept row)."""

    def __init__(self, directory: str, schema: pa.Schema, shards: int, unique_ids: bool = False):
        self.directory, self.schema, self.shards, self.unique_ids = directory, schema, shards, unique_ids

    def process(self, element):
        shard, rows = element
        rows = sorted(rows, key=_provenance_order)
        if self.unique_ids:
            kept = []
            for row in rows:
                if kept and kept[-1]["id"] == row["id"]:
                    yield beam.pvalue.TaggedOutput(DUPLICATE_IDS, (row, kept[-1]))
                else:
                    kept.append(row)
            rows = kept
        path = join(self.directory, f"part-{shard:05d}-of-{self.shards:05d}.parquet")
        with FileSystems.create(path) as fh:
            fh.write(parquet_bytes(rows, self.schema))
        yield shard, len(rows)


class WriteSortedParquet(beam.PTransform):
    """Deterministic output: rows go to shard hash(id) % shards, each shard sorted by id, every shard
    written (empty ones too). Same rows in -> byte-identical files, whatever the worker count.
    A shard is materialized in one worker, so choose `shards` so that a shard fits in memory.
    With `unique_ids` the result has a second output, DUPLICATE_IDS: rows not written because their
    id was already written (the copy read from the smallest warc_file, warc_offset is kept)."""

    def __init__(self, directory: str, schema: pa.Schema, shards: int, unique_ids: bool = False):
        super().__init__()
        self.directory, self.schema, self.shards, self.unique_ids = directory, schema, shards, unique_ids

    def expand(self, rows):
        keyed = rows | "KeyByShard" >> beam.Map(lambda r, n: (shard_of(r["id"], n), r), self.shards)
        every_shard = (rows.pipeline | "AllShards" >> beam.Create(list(range(self.shards)))
                       | "NoRows" >> beam.Map(lambda s: (s, None)))
        return ((keyed, every_shard) | "Union" >> beam.Flatten() | "GroupShard" >> beam.GroupByKey()
                | "DropPlaceholders" >> beam.MapTuple(lambda s, rs: (s, [r for r in rs if r is not None]))
                | "WriteShard" >> self._write())

    def _write(self):
        write = beam.ParDo(_WriteShard(self.directory, self.schema, self.shards, self.unique_ids))
        return write.with_outputs(DUPLICATE_IDS, main="written") if self.unique_ids else write


class _WriteBundleFiles(beam.DoFn):
    """Buffers (folder, row) pairs and writes each folder's rows as Parquet files in its temp folder
    (pyarrow converts a whole batch in C++; WriteToParquet's per-row conversion cost as much as a tenth
    of extraction). Emits (folder, temp path); a retried bundle's files are never committed, so
    retries cannot duplicate rows."""

    def __init__(self, schema: pa.Schema, max_rows: int = 5000, max_bytes: int = 64 << 20):
        self.schema, self.max_rows, self.max_bytes = schema, max_rows, max_bytes

    def start_bundle(self):
        self.rows, self.size = {}, {}

    def process(self, folder_row):
        folder, row = folder_row
        self.rows.setdefault(folder, []).append(row)
        # the columns that matter for size
        self.size[folder] = self.size.get(folder, 0) + len(row.get("text") or "") + len(row.get("payload") or b"")
        if len(self.rows[folder]) >= self.max_rows or self.size[folder] >= self.max_bytes:
            yield self._flush(folder)

    def finish_bundle(self):
        for folder in sorted(self.rows):
            if self.rows[folder]:
                yield WindowedValue(self._flush(folder), MIN_TIMESTAMP, [GlobalWindow()])

    def _flush(self, folder: str) -> tuple[str, str]:
        path = join(folder, ".tmp", f"{uuid.uuid4().hex}.parquet")
        with FileSystems.create(path) as fh:
            # small row groups: the next stage's Parquet source splits at row groups, so a few large
            # files still spread evenly over the workers
            fh.write(parquet_bytes(self.rows[folder], self.schema, "snappy", row_group_size=500))
        self.rows[folder], self.size[folder] = [], 0
        return folder, path


def _commit(written: list[tuple[str, str]], folders: list[str], schema: pa.Schema) -> int:
    """Moves each folder's written files into place as part-NNNNN.parquet (one empty file if there
    were none, so the next stage always finds its input) and removes the temp folders."""
    for folder in folders:
        paths = sorted(path for f, path in written if f == folder)
        if paths:
            FileSystems.rename(paths, [join(folder, f"part-{i:05d}.parquet") for i in range(len(paths))])
        else:
            with FileSystems.create(join(folder, "part-00000.parquet")) as fh:
                fh.write(parquet_bytes([], schema))
        delete_tree(join(folder, ".tmp"))
    return len(written)


def write_parquet(pcoll, directory: str, schema: pa.Schema, label: str):
    """Intermediate stage output (no ordering guarantee, any number of files)."""
    return write_parquet_folders(pcoll | f"{label}/Folder" >> beam.Map(lambda row: (directory, row)),
                                 [directory], schema, label)


def write_parquet_folders(pcolls, folders: list[str], schema: pa.Schema, label: str):
    """(folder, row) pairs written under their folder, one of `folders` (each gets its files, or
    one empty file): several outputs of the same schema for the cost of one write. `pcolls`: one
    PCollection of pairs, or several, each written where it is made (no Flatten gathers the rows in
    one place first: only the written files' paths are gathered)."""
    if isinstance(pcolls, beam.PCollection):
        written = pcolls | f"{label}/Files" >> beam.ParDo(_WriteBundleFiles(schema))
    else:
        written = ([pcoll | f"{label}/Files{i}" >> beam.ParDo(_WriteBundleFiles(schema))
                    for i, pcoll in enumerate(pcolls)] | f"{label}/AllFiles" >> beam.Flatten())
    return (written | f"{label}/Paths" >> beam.combiners.ToList()
            | f"{label}/Commit" >> beam.Map(_commit, folders, schema))


def after(p, value, ready: list, label: str):
    """`value` as a one-element PCollection that exists only once every PCollection in `ready` is
    complete (a side input is computed in full before its consumer runs): how a pipeline reads files
    another part of it writes."""
    waits = [beam.pvalue.AsList(r) for r in ready]
    return p | f"{label}/Value" >> beam.Create([value]) | f"{label}/After" >> beam.Map(lambda v, *_: v, *waits)


def read_parquet(p, directory: str, label: str):
    return p | label >> beam.io.ReadFromParquet(join(directory, "part*.parquet"))
