"""The loss audit a run performs on its own outputs, in the run's pipeline, once the text branch's
outputs are written.

The per-stage identity (in = out + Σ dropped) proves the counts; the audit proves the rows. Every row
the input-reading stage emitted ends in exactly one terminal place, the final documents (`docs/text`)
or `dropped/<stage>` of a stage on the way, so over those places:
- each provenance (warc_file, warc_offset, id) occurs once: no record was read or written twice
  (records of one multi-record gzip member share an offset and differ in id);
- each id occurs once in the final documents: what the packer and trainer read has no repeated document;
- per input file, the rows found equal the rows the reader emitted for it (`<reader>/file_rows.json`):
  none was lost between stages.
Only the three provenance columns are read (Parquet column projection), with Beam transforms, so the
check scales with the outputs. A violation fails the run naming the offending ids.
"""

from __future__ import annotations

import apache_beam as beam

from pipelines import io
from pipelines.stages import FILE_ROWS_JSON

SAMPLE = 20  # offending ids named per check
CHECKS = ("provenance_repeated", "kept_id_repeated", "file_rows_mismatch")


class LossAuditError(RuntimeError):
    """A record was lost or duplicated between the reader and the final outputs."""


def _provenance(row: dict):
    return (row["warc_file"] or "", row["warc_offset"] if row["warc_offset"] is not None else -1, row["id"])


def _file_mismatches(element):
    path, (found, emitted) = element
    found_n, emitted_n = sum(found), sum(emitted)
    if found_n != emitted_n:
        yield f"{path}: reader emitted {emitted_n} rows, outputs hold {found_n}"


def _repeats(pcoll, label: str):
    """Keys that occur more than once, at most SAMPLE of them (smallest first: deterministic)."""
    return (pcoll | f"{label}/One" >> beam.Map(lambda k: (k, 1)) | f"{label}/Sum" >> beam.CombinePerKey(sum)
            | f"{label}/Repeated" >> beam.Filter(lambda kn: kn[1] > 1)
            | f"{label}/Name" >> beam.MapTuple(lambda k, n: f"{k} x{n}")
            | f"{label}/Sample" >> beam.combiners.Top.Of(SAMPLE, reverse=True))


def add_audit(p, root: str, stages: list[str], kept_place: str, ready: list) -> None:
    """Adds the audit to pipeline `p`: over the final documents (`kept_place` under root) and
    `dropped/<stage>` of `stages`, the first of which read the input, read once every PCollection in
    `ready` (the writes of those outputs in this pipeline) is complete. The report goes to
    OUT/stats/audit.json; `audit_report` reads it after the pipeline."""
    places = [kept_place] + [f"dropped/{s}" for s in stages]
    kept_folder = io.join(root, kept_place)
    patterns = [io.join(root, place, "part*.parquet") for place in places]
    read = (io.after(p, patterns, ready, "Audit/Patterns") | "Audit/EachPattern" >> beam.FlatMap(lambda ps: ps)
            | "Audit/Read" >> beam.io.ReadAllFromParquet(columns=["id", "warc_file", "warc_offset"],
                                                         with_filename=True)
            | "Audit/Place" >> beam.Map(lambda fr: (fr[0].startswith(kept_folder + "/"), fr[1])))
    rows = read | "Audit/Rows" >> beam.Values()
    kept = read | "Audit/Kept" >> beam.Filter(lambda kr: kr[0]) | "Audit/KeptRows" >> beam.Values()
    found = rows | "Audit/FileOf" >> beam.Map(lambda r: (r["warc_file"] or "", 1))
    emitted_rows = (io.after(p, io.join(root, stages[0], FILE_ROWS_JSON), ready, "Audit/FileRows")
                    | "Audit/ReadFileRows" >> beam.Map(lambda path: io.read_json(path) or {}))
    emitted = emitted_rows | "Audit/Emitted" >> beam.FlatMap(lambda rows: sorted(rows.items()))
    results = {
        "provenance_repeated": _repeats(rows | "Audit/Provenance" >> beam.Map(_provenance), "Audit/Provenance"),
        "kept_id_repeated": _repeats(kept | "Audit/KeptIds" >> beam.Map(lambda r: r["id"]), "Audit/KeptIds"),
        "file_rows_mismatch": ({"found": found, "emitted": emitted} | "Audit/ByFile" >> beam.CoGroupByKey()
                               | "Audit/Compare" >> beam.MapTuple(lambda path, g: (path, (g["found"], g["emitted"])))
                               | "Audit/Mismatch" >> beam.FlatMap(_file_mismatches)
                               | "Audit/MismatchSample" >> beam.combiners.Top.Of(SAMPLE, reverse=True)),
        "rows": rows | "Audit/CountRows" >> beam.combiners.Count.Globally(),
        "files": emitted_rows | "Audit/Files" >> beam.Map(len),
    }
    info = {"stages": stages, "kept": kept_place}

    def finish(report: dict) -> None:
        report.update(info, ok=not any(report[k] for k in CHECKS))
        io.write_json(io.join(root, "stats", "audit.json"), report)

    ([results[k] | f"Audit/Label {k}" >> beam.Map(lambda v, k=k: (k, v)) for k in results]
     | "Audit/AllChecks" >> beam.Flatten() | "Audit/Report" >> beam.combiners.ToDict()
     | "Audit/Write" >> beam.Map(finish))


def audit_report(root: str) -> dict:
    """The report `add_audit` wrote; raises LossAuditError on a violation."""
    report = io.read_json(io.join(root, "stats", "audit.json"))
    if not report["ok"]:
        problems = "; ".join(f"{k}: {', '.join(map(str, report[k]))}" for k in CHECKS if report[k])
        raise LossAuditError(f"loss audit failed under {root}: {problems}")
    return report


def audit(options, root: str, stages: list[str], kept_place: str) -> dict:
    """The audit as a pipeline of its own, over outputs already written (a finished run's)."""
    with beam.Pipeline(options=options) as p:
        add_audit(p, root, stages, kept_place, ready=[])
    return audit_report(root)
