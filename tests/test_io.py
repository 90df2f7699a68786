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
