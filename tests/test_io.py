"""pipelines/io.py helpers that the stages rely on."""

from __future__ import annotations

import os

from apache_beam.io.localfilesystem import LocalFileSystem

from pipelines.io import local_copy


class AliasFileSystem(LocalFileSystem):
    """`alias://<path>` is the local <path>: a remote-looking filesystem for the test (Beam finds
    FileSystem subclasses by their scheme)."""

    @classmethod
    def scheme(cls):
        return "alias"

    def open(self, path, *args, **kwargs):
        return super().open(path.removeprefix("alias://"), *args, **kwargs)

    def exists(self, path):
        return super().exists(path.removeprefix("alias://"))


def test_a_remote_model_is_copied_with_its_sidecar_and_a_local_one_is_not(tmp_path):
    (tmp_path / "llm.ftz").write_bytes(b"model")
    (tmp_path / "llm.json").write_text('{"threshold": 0.5}')
    local = local_copy(f"alias://{tmp_path / 'llm.ftz'}", sidecars=(".json", ".missing"))
    assert os.path.basename(local) == "llm.ftz" and open(local, "rb").read() == b"model"
    assert sorted(os.listdir(os.path.dirname(local))) == ["llm.ftz", "llm.json"]
    assert local_copy(str(tmp_path / "llm.ftz")) == str(tmp_path / "llm.ftz") and local_copy(None) is None


def test_several_pcollections_of_rows_are_written_where_they_are_made_into_their_folders(tmp_path):
    """write_parquet_folders with a PCollection of (folder, row) pairs per stage: each row in its folder
    once, whichever PCollection it came in; a folder no row went to gets one empty file. The rows are
    written in the stages that make them (no Flatten gathers them first)."""
    import apache_beam as beam
    import pyarrow.parquet as pq

    from pipelines.io import DROP_SCHEMA, write_parquet_folders

    folders = [str(tmp_path / name) for name in ("language", "quality", "empty")]
    row = lambda i, stage: {"id": f"{i:04d}", "stage": stage, "reason": "r", "text": f"text {i}"}  # noqa: E731
    with beam.Pipeline(runner="FnApiRunner") as p:
        first = p | "First" >> beam.Create(range(30)) | "A" >> beam.Map(lambda i: (folders[0], row(i, "language")))
        second = (p | "Second" >> beam.Create(range(30, 35)) | "Spread second" >> beam.Reshuffle()
                  | "B" >> beam.Map(lambda i: (folders[1], row(i, "quality"))))
        write_parquet_folders([first, second], folders, DROP_SCHEMA, "WriteDropped")
    read = {os.path.basename(f): sorted(r["id"] for part in sorted(os.listdir(f))
                                        for r in pq.read_table(os.path.join(f, part)).to_pylist())
            for f in folders}
    assert read == {"language": [f"{i:04d}" for i in range(30)], "quality": [f"{i:04d}" for i in range(30, 35)],
                    "empty": []}
    assert os.listdir(folders[2]) == ["part-00000.parquet"]
