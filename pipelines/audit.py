"""The loss audit a run performs on its own outputs, after the text branch has finished.

The per-stage identity (in = out + Σ dropped) proves the counts; the audit proves the rows. Every row
the input-reading stage emitted ends in exactly one terminal place, the final documents (`docs/text`)
or `dropped/<stage>` of a stage on the way, so over those places:
- each provenance (warc_file, warc_offset, id) occurs once: no record was read or written twice
  (records of one multi-record gzip member share an offset and differ in id);
- each id occurs once in the final documents: what the packer and trainer read has no repeated document;
- per input file, the rows found equal the rows the reader emitted for it (`<reader>/file_rows.json`):
  none was lost between stages.
Only the three provenance columns are read (Parquet column projection), as one Beam pipeline, so the
check scales with the outputs. A violation fails the run naming the offending ids.
"""

from __future__ import annotations

import apache_beam as beam

from pipelines import io
from pipelines.stages import FILE_ROWS_JSON

SAMPLE = 20  # offending ids named per check


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


def audit(options, root: str, stages: list[str], kept_place: str) -> dict:
    """Run the audit over the final documents (`kept_place` under root) and `dropped/<stage>` of
    `stages`, the first of which read the input; returns the report (also written to
    OUT/stats/audit.json) and raises LossAuditError on a violation."""
    emitted_rows = io.read_json(io.join(root, stages[0], FILE_ROWS_JSON)) or {}
    checks = ("provenance_repeated", "kept_id_repeated", "file_rows_mismatch")

    def finish(report: dict) -> None:
        report.update(files=len(emitted_rows), stages=stages, kept=kept_place, ok=not any(report[k] for k in checks))
        io.write_json(io.join(root, "stats", "audit.json"), report)

    with beam.Pipeline(options=options) as p:
        columns = ["id", "warc_file", "warc_offset"]
        kept, *dropped = [p | f"Read {place}" >> beam.io.ReadFromParquet(io.join(root, place, "part*.parquet"),
                                                                          columns=columns)
                          for place in [kept_place] + [f"dropped/{s}" for s in stages]]
        rows = [kept, *dropped] | "AllRows" >> beam.Flatten()
        found = rows | "FileOf" >> beam.Map(lambda r: (r["warc_file"] or "", 1))
        emitted = p | "Emitted" >> beam.Create(sorted(emitted_rows.items()))
        results = {
            "provenance_repeated": _repeats(rows | "Provenance" >> beam.Map(_provenance), "Provenance"),
            "kept_id_repeated": _repeats(kept | "KeptIds" >> beam.Map(lambda r: r["id"]), "KeptIds"),
            "file_rows_mismatch": ({"found": found, "emitted": emitted} | "ByFile" >> beam.CoGroupByKey()
                                   | "Compare" >> beam.MapTuple(lambda path, g: (path, (g["found"], g["emitted"])))
                                   | "Mismatch" >> beam.FlatMap(_file_mismatches)
                                   | "MismatchSample" >> beam.combiners.Top.Of(SAMPLE, reverse=True)),
            "rows": rows | "CountRows" >> beam.combiners.Count.Globally(),
        }
        ([results[k] | f"Label {k}" >> beam.Map(lambda v, k=k: (k, v)) for k in results]
         | "AllChecks" >> beam.Flatten() | "Report" >> beam.combiners.ToDict() | "WriteReport" >> beam.Map(finish))
    report = io.read_json(io.join(root, "stats", "audit.json"))
    if not report["ok"]:
        problems = "; ".join(f"{k}: {', '.join(map(str, report[k]))}" for k in checks if report[k])
        raise LossAuditError(f"loss audit failed under {root}: {problems}")
    return report
