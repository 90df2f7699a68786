"""Data side of the trainer: shard phases, held-out documents, batches, vocabulary map, bytes per token.

* Phases: `find_phases(DIR)` accepts a phase folder (holding manifest.json), a shards folder
  (holding pretrain/ and long/) or a run's output folder (holding shards/).
* Held-out documents: document d is held out when int(sha1(doc_id)[:8], 16) % holdout_every == 0
  (default 1 in 20, ≈5%): deterministic, independent of order, rank and epoch, and every chunk of a
  document goes the same way. Held-out segments are cut out of the training sequences before the
  model sees them (with within-document attention and per-segment positions, that is exactly the
  same as training on the rest of the sequence), and repacked as the evaluation set.
* Batches: a step reads `n` packed sequences of the current phase (sequence order as in the shards,
  epoch after epoch), removes held-out segments, and pads the rows to the longest one; padding has
  segment id −1 and no loss.
* Labels (loss masking): position i of a row has target input_ids[i+1] when i+1 is in the same
  segment, else none (−100). So every document predicts its own next tokens up to and including
  its EOS; the last token of a segment predicts nothing (the next token is another document's, so
  a document's first token — BOS — is never predicted from the previous document); a chunk that
  continues a document in another sequence has its first token unpredicted; padding predicts
  nothing and is never a target.
* Images: a segment carries its image spans (`Piece`: token ids + (offset in the segment, tokens,
  sha256, height, width) per visual-token block), so cutting out held-out segments and repacking
  them moves each block with its tokens; `rows_to_batch` re-bases the offsets to row positions
  (batch["images"]). A visual token is never a target: the token before a block and every token
  of the block but the last predict nothing (their targets are placeholder ids); the block's last
  token predicts the text after the image. Held-out loss and BPB are therefore over text targets
  only.
* `VocabMap`: "full" uses the tokenizer's ids as they are. "compact" (the CPU default) keeps the
  token ids the evaluation can ask for and the frequent training ids: every id of the held-out
  documents, the ids occurring ≥ min_count times in the training documents, and BOS, EOS and the
  image placeholder (never a target, so it costs no UNK mass, and its own input row where a
  text-only model reads it as a token). All others map to one UNK class whose probability is spread
  uniformly over the V − K ids it stands for; the model is then still a distribution over the whole
  vocabulary: log p(t) = log p_model(UNK) − ln(V − K) for an unkept t, and every loss and BPB figure
  is in those full-vocabulary nats. Keeping the held-out ids gives them what "full" gives every id, a
  row of their own that training only pushes down (what they are is known, how often they occur is
  not); the UNK class learns the mass of rare training ids. With the DeepSeek-V3 vocabulary (129,280
  ids) an untied 129K-row head costs ≈7 s per 2,048-token sequence on a 2-core CPU; the sample needs
  ≈22.5K rows. The evaluation reports, on the same targets, the uniform loss ln V and the
  training-unigram loss (`unigram_log_probs`: add-one counts over the model's own classes, so the
  baseline knows the same vocabulary the model does), and the loss on the targets the vocabulary
  keeps, so that the number can be read.
* `token_byte_lengths`: UTF-8 bytes each token id stands for, for bits-per-byte. Byte-level BPE
  (tokenizer.json with a ByteLevel decoder, as DeepSeek-V3): each vocabulary entry maps character
  by character back through the GPT-2 byte alphabet, so the count is exact and Σ bytes over a
  document's tokens = len(text.encode("utf-8")). BOS, EOS and pad count 0 bytes; other added
  tokens count the UTF-8 bytes of their content (they can only come from literal text). Other
  tokenizer types: "▁" counts as one byte (space), "<0xNN>" byte-fallback tokens one byte, other
  entries their UTF-8 length (approximate: decoders may strip a leading space).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from packing.shards import open_shards, read_manifest

__all__ = ["PhaseShards", "Piece", "find_phases", "is_held_out", "split_pieces", "PhaseStream", "make_batch",
           "eval_rows", "with_pixels", "image_digests", "VocabMap", "token_byte_lengths", "resolve_tokenizer"]

IGNORE = -100


@dataclass
class PhaseShards:
    """One phase's folder of packed shards, as its manifest.json describes it (what the trainer reads;
    not `packing.phases.Phase`, the phase's packing settings)."""

    name: str
    directory: str
    seq_len: int
    sequences: int
    tokens: int
    tokenizer: dict
    images: int = 0  # image spans in the phase (manifest "images"; absent: a text-only phase)
    image_token_id: int | None = None  # the placeholder id of visual tokens (manifest "image_token_id")

    @property
    def tokens_per_sequence(self) -> float:
        return self.tokens / self.sequences if self.sequences else 0.0


def find_phases(directory: str) -> dict[str, PhaseShards]:
    """Phases under `directory` with at least one sequence, by name (pretrain first)."""
    directory = os.path.abspath(directory)
    if "phase" in (read_manifest(directory) or {}):  # a phase folder (OUT/shards/manifest.json is the run's)
        folders = [directory]
    else:
        base = os.path.join(directory, "shards") if os.path.isdir(os.path.join(directory, "shards")) else directory
        folders = [os.path.join(base, n) for n in sorted(os.listdir(base)) if os.path.isdir(os.path.join(base, n))]
    phases = {}
    for folder in folders:
        meta = read_manifest(folder)
        if meta is None or not meta.get("sequences"):
            continue
        phases[meta["phase"]] = PhaseShards(meta["phase"], folder, int(meta["seq_len"]),
                                            int(meta["sequences"]), int(meta["tokens"]), meta["tokenizer"],
                                            int(meta.get("images") or 0), meta.get("image_token_id"))
    if not phases:
        raise FileNotFoundError(f"no shard phase with sequences under {directory}")
    return dict(sorted(phases.items(), key=lambda kv: (kv[0] != "pretrain", kv[0])))


def is_held_out(doc_id: str, holdout_every: int) -> bool:
    if holdout_every <= 0:
        return False
    return int(hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:8], 16) % holdout_every == 0


@dataclass(frozen=True)
class Piece:
    """One segment as the trainer carries it: its token ids and its image spans, each (offset of the
    first visual token in the segment, tokens, sha256, height, width). len() is its token count."""

    ids: np.ndarray
    images: tuple = ()

    def __len__(self) -> int:
        return len(self.ids)


def split_pieces(item: dict, holdout_every: int) -> tuple[list[Piece], list[Piece]]:
    """(training segments, held-out segments) of one packed sequence, each with its image spans
    re-based from sequence positions to offsets in its segment."""
    ids, cu = item["input_ids"], np.asarray(item["cu_seqlens"])
    spans: list[list[tuple]] = [[] for _ in item["doc_ids"]]
    for span in item.get("images") or ():
        i = int(np.searchsorted(cu, span["pos"], side="right")) - 1  # the segment holding the block
        spans[i].append((int(span["pos"] - cu[i]), int(span["tokens"]), span["sha256"], int(span["height"]),
                         int(span["width"])))
    train, held = [], []
    for i, doc in enumerate(item["doc_ids"]):
        piece = Piece(np.asarray(ids[cu[i]:cu[i + 1]], dtype=np.int64), tuple(spans[i]))
        (held if is_held_out(doc, holdout_every) else train).append(piece)
    return train, held


def split_segments(item: dict, holdout_every: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(training segments, held-out segments) of one packed sequence, as token-id arrays."""
    train, held = split_pieces(item, holdout_every)
    return [p.ids for p in train], [p.ids for p in held]


class PhaseStream:
    """A phase's sequences in shard order, epoch after epoch; `consumed` is the resume cursor."""

    def __init__(self, phase: PhaseShards, consumed: int = 0) -> None:
        self.phase = phase
        self.consumed = consumed
        self._it: Iterator[dict] | None = None

    def _iterate(self, skip: int) -> Iterator[dict]:
        while True:
            for k, item in enumerate(open_shards(self.phase.directory)):
                if k >= skip:
                    yield item
            skip = 0

    def next(self) -> dict:
        """The sequence at position `consumed` (modulo the phase's sequences); advances the cursor."""
        if self._it is None:
            self._it = self._iterate(self.consumed % self.phase.sequences)
        item = next(self._it)
        self.consumed += 1
        return item


def rows_to_batch(rows: list[list[Piece | np.ndarray]]) -> dict:
    """Pad rows (each a list of segments: Pieces or token-id arrays) into input_ids, segment_ids,
    position_ids, labels (B, T) tensors; when a segment has image spans, also "images": one dict per
    span, {"row", "pos" (in the row), "tokens", "sha256", "height", "width"}, and no targets on
    placeholders (see the module docstring)."""
    T = max(sum(len(s) for s in row) for row in rows)
    B = len(rows)
    input_ids = np.zeros((B, T), dtype=np.int64)
    segment_ids = np.full((B, T), -1, dtype=np.int64)
    position_ids = np.zeros((B, T), dtype=np.int64)
    labels = np.full((B, T), IGNORE, dtype=np.int64)
    images = []
    for b, row in enumerate(rows):
        start = 0
        for s, seg in enumerate(row):
            piece = seg if isinstance(seg, Piece) else Piece(np.asarray(seg))
            n = len(piece)
            input_ids[b, start:start + n] = piece.ids
            segment_ids[b, start:start + n] = s
            position_ids[b, start:start + n] = np.arange(n)
            labels[b, start:start + n - 1] = piece.ids[1:]
            for offset, tokens, sha256, height, width in piece.images:
                pos = start + offset
                labels[b, max(start, pos - 1):pos + tokens - 1] = IGNORE  # targets that are placeholders
                images.append({"row": b, "pos": pos, "tokens": tokens, "sha256": sha256, "height": height,
                               "width": width})
            start += n
    batch = {"input_ids": torch.from_numpy(input_ids), "segment_ids": torch.from_numpy(segment_ids),
             "position_ids": torch.from_numpy(position_ids), "labels": torch.from_numpy(labels)}
    if images:
        batch["images"] = images
    return batch


def with_pixels(batch: dict, image_store) -> dict:
    """The batch with each image span's uint8 (height, width, 3) pixels from `image_store` (a
    packing.images.ImageStore) added as "pixels"."""
    if "images" not in batch:
        return batch
    if image_store is None:
        raise ValueError("the batch has image spans: their pixels need an image store (packing.images.ImageStore)")
    return {**batch, "images": [{**image, "pixels": image_store.pixels(image["sha256"], image["height"],
                                                                        image["width"])}
                                for image in batch["images"]]}


def image_digests(phases: list[PhaseShards]) -> set[str]:
    """The sha256 of every image span in the phases (training and held-out segments)."""
    return {span["sha256"] for phase in phases if phase.images
            for item in open_shards(phase.directory) for span in item["images"]}


def make_batch(stream: PhaseStream, n_sequences: int, holdout_every: int) -> tuple[dict, int]:
    """The next training batch from `stream` and the real tokens of the sequences it consumed.

    Reads n_sequences sequences (more if all of their segments were held out)."""
    rows, consumed_tokens, skipped = [], 0, 0
    while len(rows) < n_sequences:
        item = stream.next()
        consumed_tokens += int(item["num_tokens"])
        train, _ = split_pieces(item, holdout_every)
        if train:
            rows.append(train)
        else:
            skipped += 1
            if skipped > stream.phase.sequences:
                raise ValueError(f"phase {stream.phase.name}: every document is held out")
    return rows_to_batch(rows), consumed_tokens


def eval_rows(phases: list[PhaseShards], holdout_every: int,
              max_tokens: int) -> dict[str, list[list[Piece]]]:
    """By phase, the held-out segments of `phases` (phases in order, shard order within, whole segments,
    until max_tokens in all), repacked greedily into rows of at most the phase's seq_len tokens."""
    out, total = {}, 0
    for phase in phases:
        rows = out.setdefault(phase.name, [])
        row, row_len = [], 0
        for item in open_shards(phase.directory):
            if total >= max_tokens:
                break
            _, held = split_pieces(item, holdout_every)
            for seg in held:
                if total >= max_tokens:
                    break
                if row and row_len + len(seg) > phase.seq_len:
                    rows.append(row)
                    row, row_len = [], 0
                row.append(seg)
                row_len += len(seg)
                total += len(seg)
        if row:
            rows.append(row)
    return out


class VocabMap:
    """Maps tokenizer ids to model classes: identity ("full"), or the kept ids + one UNK ("compact")."""

    def __init__(self, vocab_size: int, keep: list[int] | None = None) -> None:
        self.vocab_size = vocab_size
        self.keep = None if keep is None else sorted(int(k) for k in keep)
        if self.keep is None:
            self.size, self.unk, self.unk_log_count = vocab_size, -1, 0.0
            self.table = None
        else:
            K = len(self.keep)
            self.size, self.unk = K + 1, K
            self.unk_log_count = math.log(vocab_size - K) if vocab_size > K else 0.0
            table = np.full(vocab_size, K, dtype=np.int64)
            table[self.keep] = np.arange(K)
            self.table = torch.from_numpy(table)

    @property
    def mode(self) -> str:
        return "full" if self.keep is None else "compact"

    @classmethod
    def compact(cls, counts: np.ndarray, min_count: int = 2, always: tuple[int | None, ...] = (),
                cover: np.ndarray | None = None) -> "VocabMap":
        """The ids seen at least `min_count` times in `counts` (training counts), the ids `cover` counts
        at all (the held-out documents') and `always`."""
        keep = set(np.nonzero(counts >= min_count)[0].tolist())
        if cover is not None:
            keep.update(np.nonzero(cover)[0].tolist())
        keep.update(a for a in always if a is not None)
        return cls(len(counts), sorted(keep))

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        """Model classes of tokenizer ids (ignore labels −100 stay −100)."""
        if self.table is None:
            return ids
        table = self.table.to(ids.device)
        return torch.where(ids >= 0, table[ids.clamp_min(0)], ids)


def token_counts(phases: list[PhaseShards], holdout_every: int, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """How often each token id occurs in the (training, held-out) segments of the phases."""
    counts = np.zeros((2, vocab_size), dtype=np.int64)
    for phase in phases:
        for item in open_shards(phase.directory):
            for part, segments in zip(counts, split_segments(item, holdout_every)):
                for seg in segments:
                    part += np.bincount(seg, minlength=vocab_size)[:vocab_size]
    return counts[0], counts[1]


def unigram_log_probs(counts: np.ndarray, vocab: "VocabMap | None" = None) -> np.ndarray:
    """Add-one smoothed unigram over the model's classes (`vocab`; every id when None): log p(t) =
    log((c + 1) / (N + C)) for t's class with c its training count, C the number of classes, less
    ln(V − K) for an id the UNK class stands for. The held-out loss a model with the same vocabulary
    that learnt only token frequencies would reach: the baseline for the figure."""
    if vocab is None or vocab.keep is None:
        return np.log(counts + 1.0) - math.log(float(counts.sum()) + len(counts))
    classes = np.bincount(vocab.table.numpy(), weights=counts, minlength=vocab.size)
    log_p = np.log(classes + 1.0) - math.log(float(counts.sum()) + vocab.size)
    return log_p[vocab.table.numpy()] - np.where(vocab.table.numpy() == vocab.unk, vocab.unk_log_count, 0.0)


def resolve_tokenizer(tokenizer: dict, override: str | None = None) -> tuple[str | None, str]:
    """(tokenizer.json path or None, note): the override, else the manifest's tokenizer name."""
    from packing.tokenizer import resolve_tokenizer_file

    spec = override or tokenizer.get("name")
    try:
        path = resolve_tokenizer_file(spec)
    except Exception as exc:  # noqa: BLE001 - any failure means "no bytes table", reported
        return None, f"tokenizer {spec!r} not found ({exc.__class__.__name__}: {exc})"
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if tokenizer.get("sha256") and digest != tokenizer["sha256"]:
        return path, f"warning: {path} has sha256 {digest[:12]}…, the manifest {tokenizer['sha256'][:12]}…"
    return path, "ok"


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: printable stand-in character → byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _is_byte_level(part: dict | None) -> bool:
    if not part:
        return False
    if part.get("type") == "ByteLevel":
        return True
    return any(_is_byte_level(p) for p in part.get("decoders", []) or part.get("pretokenizers", []))


def token_byte_lengths(tokenizer_path: str, vocab_size: int,
                       zero_ids: tuple[int | None, ...]) -> tuple[np.ndarray, str]:
    """(bytes of each token id as int64 array of vocab_size, method) — see the module docstring."""
    with open(tokenizer_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    vocab = spec["model"].get("vocab", {})
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        vocab = {piece: i for i, (piece, _) in enumerate(vocab)}
    size = max([vocab_size, *(i + 1 for i in vocab.values()), *(t["id"] + 1 for t in spec.get("added_tokens", []))])
    lengths = np.zeros(size, dtype=np.int64)
    byte_level = _is_byte_level(spec.get("decoder")) or _is_byte_level(spec.get("pre_tokenizer"))
    decoder = _byte_decoder()
    for token, i in vocab.items():
        if byte_level and all(c in decoder for c in token):
            lengths[i] = len(token)  # one stand-in character per byte
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            lengths[i] = 1
        else:
            lengths[i] = len(token.replace("▁", " ").encode("utf-8"))
    for added in spec.get("added_tokens", []):
        lengths[added["id"]] = len(added["content"].encode("utf-8"))
    for i in zero_ids:
        if i is not None:
            lengths[i] = 0
    return lengths, "byte-level BPE table (exact)" if byte_level else "vocabulary table (approximate)"
