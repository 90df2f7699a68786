"""The training loop (trainer/loop.py) and `curate train` (trainer/cli.py) on tiny real shards built
in the test: loss goes down, BPB is finite, resume repeats the same losses, tiered and AdamW both
run, the long phase takes over at 34/45 of the tokens (CPU, ~10 s)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from tests.test_trainer_shards import build_shards
from trainer.cli import main
from trainer.loop import train

TINY = {"d_model": 32, "n_layers": 2, "n_heads": 2, "lr": 1e-2, "log_every": 5, "eval_every": 0}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return build_shards(tmp_path_factory.mktemp("loop_shards"), n_docs=160, seq_len=128, long_docs=6)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; bitwise-identical resumes on one thread too
    yield
    torch.set_num_threads(threads)


def test_short_run_lowers_the_loss_and_reports_finite_bpb(shards):
    shards_dir, _, _ = shards
    lines = []
    out = train(shards_dir, 40, "cpu", {**TINY, "batch": 2, "long_phase": "off"}, log=lines.append)
    losses = out["losses"]
    assert len(losses) == 40 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    held = out["heldout"]
    assert held["tokens"] > 0 and held["bytes"] > 0 and 0 < held["bpb"] < 20 and math.isfinite(held["loss"])
    assert held["bpb"] == pytest.approx(held["loss"] * held["targets"] / (math.log(2) * held["bytes"]))
    # the figure comes with baselines on the same targets: uniform over the tokenizer's vocabulary
    # (ln V), the add-one training unigram over the model's classes (below uniform: it learnt the
    # frequencies), and the loss on the targets inside the compact vocabulary (all held-out ids are kept)
    assert held["uniform_loss"] == pytest.approx(math.log(out["vocab"]["tokenizer_vocab"]))
    assert held["unigram_loss"] < held["uniform_loss"]
    assert held["loss"] < held["unigram_loss"]  # it learnt more than the frequencies
    assert held["unk_targets"] == 0 and held["in_vocab_loss"] == pytest.approx(held["loss"])
    in_vocab = held["targets"] - held["unk_targets"]
    assert held["in_vocab_nats"] / in_vocab == pytest.approx(held["in_vocab_loss"])
    assert any("uniform over" in line and "training unigram" in line for line in lines)
    assert out["tokens_per_s"] > 0 and out["trained_tokens"] <= out["tokens"]
    assert set(out["routing"]) == {"sinkhorn", "muon_headwise", "muon", "adamw"}
    entry = out["history"][-1]
    assert set(entry["lr"]) == {"muon", "adamw", "sinkhorn"} and entry["tokens_per_s"] > 0
    assert any("loss" in line and "tok/s" in line and "sinkhorn=" in line for line in lines)
    assert out["vocab"]["mode"] == "compact" and out["vocab"]["bytes"].startswith("byte-level")


def test_tiered_and_adamw_both_train(shards):
    shards_dir, _, _ = shards
    runs = {opt: train(shards_dir, 12, "cpu", {**TINY, "optimizer": opt, "long_phase": "off"}, log=None)
            for opt in ("tiered", "adamw")}
    assert set(runs["adamw"]["routing"]) == {"adamw"}
    assert runs["tiered"]["losses"][0] == pytest.approx(runs["adamw"]["losses"][0])  # same model, same data
    for out in runs.values():
        assert out["losses"][-1] < out["losses"][0] and math.isfinite(out["heldout"]["bpb"])


def test_resume_continues_with_identical_losses(shards, tmp_path):
    shards_dir, _, _ = shards
    cfg = {**TINY, "checkpoint_dir": str(tmp_path / "ckpt"), "checkpoint_every": 3, "keep_checkpoints": 5}
    full = train(shards_dir, 8, "cpu", cfg, log=None)  # long phase included: its cursor is resumed too
    assert full["phase_switch_step"] is not None and full["phase_switch_step"] < 8
    files = sorted(os.listdir(tmp_path / "ckpt"))
    assert files == ["step-00000003.pt", "step-00000006.pt", "step-00000008.pt"]
    os.remove(tmp_path / "ckpt" / "step-00000008.pt")
    os.remove(tmp_path / "ckpt" / "step-00000006.pt")  # "interrupted" after step 3
    resumed = train(shards_dir, 8, "cpu", {**cfg, "resume": True}, log=None)
    assert resumed["losses"][:3] == full["losses"][:3]  # carried over from the checkpoint
    assert resumed["losses"][3:] == full["losses"][3:]  # bitwise identical continuation
    assert resumed["tokens"] == full["tokens"] and resumed["phase_switch_step"] == full["phase_switch_step"]
    assert resumed["heldout"]["bpb"] == full["heldout"]["bpb"]


def test_long_phase_takes_over_at_34_45_of_the_tokens(shards):
    shards_dir, _, _ = shards
    out = train(shards_dir, 30, "cpu", {**TINY, "log_every": 1}, log=None)
    switch = out["phase_switch_step"]
    phases = [h["phase"] for h in out["history"]]
    assert phases[switch - 1] == "pretrain" and set(phases[switch:]) == {"long"}
    before = out["history"][switch - 1]["tokens"]
    assert before >= 34 / 45 * out["schedule"]["total_tokens"] > out["history"][switch - 2]["tokens"]
    assert out["history"][-1]["lr"]["muon"] == pytest.approx(0.1 * TINY["lr"], rel=0.2)  # near the decayed end
    held = out["heldout"]  # evaluated over both phases' held-out documents, and per phase
    assert set(held["by_phase"]) == {"pretrain", "long"}
    assert held["nats"] == pytest.approx(sum(p["nats"] for p in held["by_phase"].values()))
    assert held["tokens"] == sum(p["tokens"] for p in held["by_phase"].values())


def test_cli_prints_log_lines_and_a_json_summary(shards, tmp_path, capsys):
    shards_dir, _, _ = shards
    rc = main(["--shards", shards_dir, "--steps", "6", "--d-model", "32", "--layers", "1", "--heads", "2",
               "--log-every", "2", "--eval-every", "3", "--lr", "1e-3", "--optimizer", "adamw",
               "--checkpoint", str(tmp_path / "c"), "--out", str(tmp_path / "summary.json")])
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["steps"] == 6 and summary["optimizer"] == "adamw" and summary["heldout_bpb"] > 0
    assert any(line.startswith("step") and "tok/s" in line for line in lines)
    assert sum(line.startswith("eval step") for line in lines) == 2
    assert os.path.isfile(summary["checkpoint"])
    assert len(json.loads((tmp_path / "summary.json").read_text())["losses"]) == 6
