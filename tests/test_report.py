"""The run report's readers (pipelines/report.py), on Parquet folders written here."""

from pipelines import io
from pipelines.report import EXAMPLES, _examples


def _drop(i: int, reason: str) -> dict:
    return {"id": f"d{i}", "url": f"http://x.test/{i}", "warc_file": "x.warc.gz", "warc_offset": i, "warc_date": "",
            "stage": "quality", "reason": reason, "detail": str(i), "scores": [], "text": f"text {i} " * 50}


def _write(folder, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(io.parquet_bytes(rows, io.DROP_SCHEMA, row_group_size=4))


def test_examples_are_the_first_rows_of_each_wanted_reason_in_file_order(tmp_path):
    """The same rows a scan of every row in order gives: the first EXAMPLES of each wanted reason, over
    files and row groups, none of a reason not wanted, and only among the first max_rows rows."""
    reasons = ["a", "b", "a", "c", "a", "a", "b", "a", "c", "b", "b", "a"]
    rows = [_drop(i, r) for i, r in enumerate(reasons)]
    folder = tmp_path / "dropped" / "quality"
    _write(folder, "part-0.parquet", rows[:7])
    _write(folder, "part-1.parquet", rows[7:])

    def scan(wanted, max_rows):
        out = {}
        for row in rows[:max_rows]:
            if row["reason"] in wanted and len(out.setdefault(row["reason"], [])) < EXAMPLES:
                out[row["reason"]].append(row["detail"])
        return out

    for wanted, max_rows in [({"a", "b"}, 100), ({"a", "b", "c"}, 100), ({"b"}, 100), ({"a", "b", "c"}, 5),
                             ({"z"}, 100)]:
        found = _examples(str(tmp_path), "quality", wanted, max_rows)
        assert {r: [row["detail"] for row in found[r]] for r in found} == scan(wanted, max_rows)
        assert all(set(row) == {"reason", "detail", "url", "warc_file", "warc_offset", "text"}
                   for found_rows in found.values() for row in found_rows)
    assert _examples(str(tmp_path), "synthetic", {"a"}, 100) == {}  # no folder


def test_score_rows_hold_every_rows_scores_by_key_as_a_row_by_row_read_does(tmp_path):
    """read_scores against reading each row's map: the same (row, value) per key over folders, files, row
    groups, a null map, a missing value (NaN) and the max_rows cut; labelled() names its groups in the
    order a scan of the rows meets them."""
    import math

    import numpy as np

    from pipelines.report import read_scores

    def drops(start, reasons, stage):
        rows = []
        for i, reason in enumerate(reasons, start):
            row = {**_drop(i, reason), "stage": stage}
            row["scores"] = None if i % 7 == 3 else [("a", i * 0.5), *([("b", None)] if i % 3 == 0 else []),
                                                     *([("c", float(i))] if i % 2 else [])]
            rows.append(row)
        return rows

    quality = drops(0, ["x", "y", "x", "y", "x", "z", "x", "y", "z", "x"], "quality")
    later = drops(100, ["dup"] * 9, "exact_dedup")
    _write(tmp_path / "dropped" / "quality", "part-0.parquet", quality[:6])
    _write(tmp_path / "dropped" / "quality", "part-1.parquet", quality[6:])
    _write(tmp_path / "dropped" / "exact_dedup", "part-0.parquet", later)
    folders = ["dropped/quality", "dropped/missing", "dropped/exact_dedup"]
    for max_rows in (100, 7):
        scores = read_scores(str(tmp_path), folders, max_rows)
        rows = quality[:max_rows] + later[:max_rows]
        assert list(scores.folder) == [0] * len(quality[:max_rows]) + [2] * len(later[:max_rows])
        assert list(scores.stage) == [r["stage"] for r in rows] and list(scores.reason) == [r["reason"] for r in rows]
        for key in "abc":
            expected = [(i, dict(r["scores"])[key]) for i, r in enumerate(rows) if key in dict(r["scores"] or ())]
            found, values = scores.entries[key]
            assert list(found) == [i for i, _ in expected]
            assert all((math.isnan(v) if e is None else v == e) for v, (_, e) in zip(values, expected))
        assert set(scores.entries) == {"a", "b", "c"}
        names = ["x", "y", "z", "dup"]
        labels = np.array([names.index(r["reason"]) for r in rows])
        groups = scores.labelled("a", labels, names)
        seen = [r["reason"] for r in rows if r["scores"] is not None]
        assert list(groups) == list(dict.fromkeys(seen))
        assert {g: list(v) for g, v in groups.items()} == {
            g: [dict(r["scores"])["a"] for r in rows if r["scores"] is not None and r["reason"] == g] for g in groups}


def test_an_empty_folder_has_no_score_rows(tmp_path):
    """A folder a stage made but wrote no file into: no rows (an Arrow table without columns would claim
    as many rows as a slice asks for)."""
    from pipelines.report import read_scores

    (tmp_path / "dropped" / "quality").mkdir(parents=True)
    scores = read_scores(str(tmp_path), ["dropped/quality"], 10)
    assert len(scores.folder) == len(scores.stage) == len(scores.reason) == 0 and scores.entries == {}
