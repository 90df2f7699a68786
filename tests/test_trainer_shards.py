"""Tiny real shards for the trainer tests (imported by tests/test_trainer*.py): a byte-level BPE
tokenizer trained in place on synthetic text, documents tokenized by packing's DocTokenizer rule,
packed and written with packing's shard writer; and a check that the reader gives them back."""

from __future__ import annotations

import numpy as np

from packing.shards import MANIFEST, Segment, manifest, manifest_bytes, shard_name, write_shard
from packing.tokenizer import DocTokenizer

SUBJECTS = ["the cat", "a dog", "the old man", "my friend", "the café owner", "a naïve student", "the bird"]
VERBS = ["sees", "likes", "finds", "carries", "paints", "follows"]
OBJECTS = ["the red ball", "a small house", "the river", "an apple", "the garden", "東京の地図", "a blue hat"]
ENDINGS = [".", "!", " today.", " again.", " in the morning."]


def sentence(rng: np.random.Generator) -> str:
    return (f"{SUBJECTS[rng.integers(len(SUBJECTS))]} {VERBS[rng.integers(len(VERBS))]} "
            f"{OBJECTS[rng.integers(len(OBJECTS))]}{ENDINGS[rng.integers(len(ENDINGS))]}")


def documents(n: int, seed: int = 0, long_every: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        k = int(rng.integers(1, 5)) if not (long_every and i % long_every == 0) else 40
        docs.append(" ".join(sentence(rng) for _ in range(k)).capitalize())
    return docs


def train_tokenizer(path: str) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(documents(200, seed=99), trainer)
    tok.save(path)
    return path


def write_phase(directory, phase: str, docs: list[str], doc_tok: DocTokenizer, seq_len: int,
                prefix: str = "doc") -> dict:
    """Pack docs greedily (first fit in order) into sequences of seq_len, chunking longer docs."""
    directory.mkdir(parents=True, exist_ok=True)
    chunks = []
    for d, text in enumerate(docs):
        ids = doc_tok.encode(text).astype(np.int32)
        for c, start in enumerate(range(0, len(ids), seq_len)):
            chunks.append(Segment(f"{prefix}{d}", c, ids[start:start + seq_len]))
    sequences, current, room = [], [], seq_len
    for chunk in chunks:
        if len(chunk.ids) > room:
            sequences.append((len(sequences), current))
            current, room = [], seq_len
        current.append(chunk)
        room -= len(chunk.ids)
    if current:
        sequences.append((len(sequences), current))
    name = shard_name(0, 1)
    with open(directory / name, "wb") as fh:
        counts = write_shard(fh, sequences, seq_len, doc_tok.info.pad_id, phase)
    meta = manifest(phase, seq_len, seq_len, doc_tok.info.to_dict(), [{"file": name, **counts}], status="ok",
                    padding_target=1.0, chunks=len(chunks), documents=len(docs), groups=1, min_group_tokens=0,
                    max_group_padding_rate=0.0, groups_above_target=0, seed=0)
    (directory / MANIFEST).write_bytes(manifest_bytes(meta))
    return meta


def build_shards(root, n_docs: int = 160, seq_len: int = 128,
                 long_docs: int = 0) -> tuple[str, DocTokenizer, list[str]]:
    """root/tokenizer.json and root/shards/pretrain (+ root/shards/long with long_docs documents at
    4·seq_len). Returns (shards dir, tokenizer, pretrain documents)."""
    tok_path = train_tokenizer(str(root / "tokenizer.json"))
    doc_tok = DocTokenizer(tok_path)
    docs = documents(n_docs, seed=1, long_every=25)
    write_phase(root / "shards" / "pretrain", "pretrain", docs, doc_tok, seq_len)
    if long_docs:
        write_phase(root / "shards" / "long", "long", documents(long_docs, seed=2, long_every=1), doc_tok,
                    4 * seq_len, prefix="long")
    return str(root / "shards"), doc_tok, docs


def test_built_shards_read_back_as_the_documents(tmp_path):
    from packing import open_shards

    shards_dir, doc_tok, docs = build_shards(tmp_path, n_docs=30, seq_len=64, long_docs=2)
    chunks: dict[str, list[np.ndarray]] = {}
    for item in open_shards(shards_dir + "/pretrain"):
        cu = item["cu_seqlens"]
        for i, doc in enumerate(item["doc_ids"]):
            chunks.setdefault(doc, []).append(item["input_ids"][cu[i]:cu[i + 1]])
    assert len(chunks) == len(docs)
    for d, text in enumerate(docs):
        ids = np.concatenate(chunks[f"doc{d}"])
        assert ids.tolist() == doc_tok.encode(text).tolist()
        assert doc_tok.tok.decode(ids.tolist(), skip_special_tokens=True) == text
    assert any(len(c) > 1 for c in chunks.values())  # some documents span sequences
