"""The multimodal pretraining stage: the vision tower (trainer/vision.py), the image store
(packing/images.py), image spans through the held-out split and the batches (trainer/data.py), the
scatter of image embeddings into the decoder (trainer/model.py), and `curate train` on a tiny
multimodal run (trainer/loop.py, trainer/cli.py): real photos (the JPEGs of the ukwa Wikipedia capture,
tests/data/images/SOURCE.md), the real DeepSeek-V3 tokenizer and its <｜image｜> placeholder (CPU, ~15 s)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from packing.images import ImageStore, find_store_folders
from packing.shards import MANIFEST, Segment, manifest, manifest_bytes, shard_name, write_shard
from pipelines.image_pairs import IMAGE_SCHEMA
from tests.test_images_decode import photos
from tests.test_trainer_shards import documents
from trainer.data import IGNORE, is_held_out, rows_to_batch, split_pieces, with_pixels
from trainer.model import ModelConfig, Transformer
from trainer.optim import build_optimizer
from trainer.vision import VisionConfig, VisionTower, merge_2x2, patchify

IMAGE_ID = 129279  # DeepSeek-V3's <｜image｜>
TINY_VIT = VisionConfig(d_vit=32, n_layers=1, n_heads=2)
# Caption after each photo names it, so the text after an image is predictable from the image only.
CAPTIONS = ["A grave under the trees.", "The facade of a church.", "A shrimp on a sea cucumber.",
            "A portrait of an old man.", "A man in a suit speaks."]
SIZES = [(56, 56), (56, 84)]  # (height, width): 4 and 6 visual tokens


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared
    yield
    torch.set_num_threads(threads)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_store(folder, images: list[bytes], row_group_size: int = 2) -> None:
    """An image store file as the pipeline writes it: IMAGE_SCHEMA, sorted by id."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for data in sorted(images, key=sha):
        im = Image.open(io.BytesIO(data))
        rows.append({"id": sha(data), "sha256": sha(data), "bytes": data, "width": im.width, "height": im.height,
                     "format": im.format, "frames": 1, "phash": "0"})
    pq.write_table(pa.Table.from_pylist(rows, schema=IMAGE_SCHEMA), folder / "part-00000-of-00001.parquet",
                   row_group_size=row_group_size)


def reference_pixels(data: bytes, height: int, width: int) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize((width, height), Image.Resampling.BICUBIC))


# --- the vision tower ----------------------------------------------------------------------------------
def test_patchify_and_merge_keep_row_major_neighbours():
    grid = torch.arange(4 * 6, dtype=torch.float32).reshape(1, 4 * 6, 1)  # a 4 x 6 grid of patch features
    merged = merge_2x2(grid, 4, 6)
    assert merged.shape == (1, 2 * 3, 4)
    assert merged[0, 0].tolist() == [0, 1, 6, 7] and merged[0, 4].tolist() == [14, 15, 20, 21]
    image = torch.arange(28 * 42 * 3).reshape(1, 28, 42, 3)
    patches = patchify(image, 14)
    assert patches.shape == (1, 2 * 3, 588)
    assert torch.equal(patches[0, 4].reshape(14, 14, 3), image[0, 14:28, 14:28])  # row 1, column 1


@pytest.mark.parametrize("height,width", [(28, 28), (56, 56), (56, 84), (84, 56), (28, 140)])
def test_vit_gives_one_embedding_per_28_px_block(height, width):
    torch.manual_seed(0)
    tower = VisionTower(TINY_VIT, d_model=48)
    out = tower(torch.randint(0, 256, (2, height, width, 3), dtype=torch.uint8))
    assert out.shape == (2, (height // 28) * (width // 28), 48) == (2, TINY_VIT.tokens(height, width), 48)
    with pytest.raises(ValueError, match="multiples of 28"):
        tower(torch.zeros(1, height + 14, width, 3, dtype=torch.uint8))


def test_vit_output_is_a_function_of_the_pixels_and_where_they_are():
    torch.manual_seed(0)
    tower = VisionTower(TINY_VIT, d_model=48).eval()
    image = torch.from_numpy(reference_pixels(photos()[2], 56, 84).copy()).unsqueeze(0)
    base = tower(image)[0]
    assert torch.equal(base, tower(image.clone())[0])  # deterministic
    swapped = image.clone()  # the 28 x 28 blocks of tokens 0 and 5 exchanged
    swapped[:, :28, :28], swapped[:, 28:, 56:] = image[:, 28:, 56:], image[:, :28, :28]
    out = tower(swapped)[0]
    # a bag of patches would just swap those two outputs: positions make the tower see the move
    assert not torch.allclose(out[0], base[5], atol=1e-4) and not torch.allclose(out[5], base[0], atol=1e-4)
    assert not torch.allclose(out, base, atol=1e-4)
    other = torch.from_numpy(reference_pixels(photos()[0], 56, 84).copy()).unsqueeze(0)
    assert (tower(other)[0] - base).abs().max() > 1e-3  # another photo, other embeddings


def test_vit_and_projector_matrices_route_to_muon():
    model = Transformer(ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, vision=TINY_VIT))
    opt = build_optimizer(model)
    vision = {n: p for n, p in model.named_parameters() if n.startswith("vision.")}
    assert any(n.startswith("vision.projector.") for n in vision) and "vision.patch_proj.weight" in vision
    for name, p in vision.items():
        route = opt.routing[name]
        if p.ndim == 2:
            expected = "muon_headwise" if name.endswith(("q_proj.weight", "k_proj.weight")) else "muon"
            assert route == expected, name
        else:
            assert route == ("adamw_no_decay" if name.endswith("bias") else "adamw"), name
    report = opt.routing_report()
    assert all(f"{name}  " in report for name in vision)


# --- the image store --------------------------------------------------------------------------------------
def test_image_store_round_trip_on_real_photos(tmp_path):
    jpegs = photos()
    run = tmp_path / "run"
    write_store(run / "images" / "interleaved", jpegs[:4])
    write_store(run / "images" / "pairs", jpegs[3:])  # one image in both stores, one only in pairs
    (run / "shards" / "pretrain").mkdir(parents=True)
    (run / "interleaved").mkdir()  # a stage's documents folder of the run: not an image store
    pq.write_table(pa.table({"id": ["d"], "text": ["x"]}), run / "interleaved" / "part-00000-of-00001.parquet")
    stores = [run / "images" / "interleaved", run / "images" / "pairs"]
    for source in (run, run / "shards", run / "shards" / "pretrain", run / "images"):
        assert find_store_folders(source) == [str(s) for s in stores]
    store = ImageStore(run / "shards" / "pretrain")
    assert len(store) == len(jpegs) and sorted(store.index) == sorted(map(sha, jpegs))
    assert len(ImageStore([stores[1]])) == len(jpegs) - 3
    for data in jpegs:
        assert store.encoded(sha(data)) == data
        for height, width in SIZES:
            pixels = store.pixels(sha(data), height, width)
            assert pixels.shape == (height, width, 3) and pixels.dtype == np.uint8
            np.testing.assert_array_equal(pixels, reference_pixels(data, height, width))
    assert store.pixels(sha(jpegs[0]), 56, 84) is store.pixels(sha(jpegs[0]), 56, 84)  # cached
    with pytest.raises(KeyError, match="0" * 64):
        store.pixels("0" * 64, 28, 28)
    assert store.missing(["0" * 64, sha(jpegs[1])]) == ["0" * 64]
    with pytest.raises(FileNotFoundError, match="no image store"):
        ImageStore(tmp_path / "elsewhere")


# --- image spans through the split, the batch and the scatter -------------------------------------------------
def test_spans_move_with_their_segments_and_visual_tokens_are_never_targets():
    held_doc = next(d for d in (f"doc{i}" for i in range(100)) if is_held_out(d, 20))
    kept = [d for d in (f"doc{i}" for i in range(100)) if not is_held_out(d, 20)][:2]
    a = [0, 11, 12, IMAGE_ID, IMAGE_ID, IMAGE_ID, IMAGE_ID, 13, 1]  # held out, an image at offset 3
    b = [0, 21, IMAGE_ID, IMAGE_ID, IMAGE_ID, IMAGE_ID, IMAGE_ID, IMAGE_ID, 22, 23, 1]  # image at offset 2
    c = [IMAGE_ID] * 4 + [31, 1]  # a continuation chunk that starts with an image
    ids = np.array(a + b + c)
    cu = np.array([0, len(a), len(a) + len(b), len(ids)])
    span = lambda pos, n, s: {"pos": pos, "tokens": n, "sha256": s, "height": 56, "width": 28 * n // 2}  # noqa: E731
    item = {"input_ids": ids, "cu_seqlens": cu, "doc_ids": [held_doc, *kept],
            "images": [span(3, 4, "a"), span(len(a) + 2, 6, "b"), span(len(a) + len(b), 4, "c")]}
    train, held = split_pieces(item, 20)
    assert [p.images for p in held] == [((3, 4, "a", 56, 56),)]
    assert [p.images for p in train] == [((2, 6, "b", 56, 84),), ((0, 4, "c", 56, 56),)]
    batch = rows_to_batch([train, held])
    assert [(i["row"], i["pos"], i["sha256"]) for i in batch["images"]] == [(0, 2, "b"), (0, len(b), "c"), (1, 3, "a")]
    for image in batch["images"]:
        assert batch["input_ids"][image["row"], image["pos"]:image["pos"] + image["tokens"]].eq(IMAGE_ID).all()
    labels = batch["labels"]
    assert labels[0, :len(b)].tolist() == [21, IGNORE, IGNORE, IGNORE, IGNORE, IGNORE, IGNORE, 22, 23, 1, IGNORE]
    assert labels[0, len(b):len(b) + len(c)].tolist() == [IGNORE, IGNORE, IGNORE, 31, 1, IGNORE]
    assert labels[1, :len(a)].tolist() == [11, 12, IGNORE, IGNORE, IGNORE, IGNORE, 13, 1, IGNORE]
    assert not (labels == IMAGE_ID).any()


def test_scatter_puts_the_projected_images_at_their_spans():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, vision=TINY_VIT))
    jpegs = photos()
    pix = [reference_pixels(jpegs[k], h, w) for k, (h, w) in [(0, (56, 56)), (1, (56, 84)), (2, (56, 56))]]
    images = [{"row": 0, "pos": 0, "tokens": 4, "pixels": pix[0]}, {"row": 1, "pos": 5, "tokens": 6, "pixels": pix[1]},
              {"row": 0, "pos": 9, "tokens": 4, "pixels": pix[2]}]
    input_ids = torch.randint(0, 64, (2, 16))
    x = model.embed(input_ids, images)
    tokens = model.embed_tokens(input_ids)
    covered = torch.zeros(2, 16, dtype=torch.bool)
    with torch.no_grad():
        for image in images:
            alone = model.vision(torch.from_numpy(image["pixels"].copy()).unsqueeze(0))[0]  # oracle: one at a time
            span = slice(image["pos"], image["pos"] + image["tokens"])
            assert torch.allclose(x[image["row"], span], alone, atol=1e-5)
            covered[image["row"], span] = True
    assert torch.equal(x[~covered], tokens[~covered])
    x.square().sum().backward()  # gradients reach the tower through the scatter
    assert model.vision.patch_proj.weight.grad.abs().sum() > 0
    assert model.vision.projector.fc2.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="6 tokens"):
        model.embed(input_ids, [{"row": 0, "pos": 12, "tokens": 6, "pixels": pix[1]}])  # past the row's end


# --- a tiny multimodal run ------------------------------------------------------------------------------
def write_multimodal_run(root, n_docs: int = 90, seq_len: int = 128) -> dict:
    """root/shards/pretrain (DeepSeek-V3 tokens, interleaved documents: text, a photo, its caption) and
    root/images/interleaved; returns counts."""
    from packing.tokenizer import DocTokenizer

    doc_tok = DocTokenizer()
    info = doc_tok.info
    enc = lambda text: doc_tok.tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    jpegs = photos()
    rng = np.random.default_rng(0)
    texts = documents(n_docs, seed=3)
    segments = []
    for d, text in enumerate(texts):
        k, (height, width) = int(rng.integers(len(jpegs))), SIZES[d % 2]
        n = (height // 28) * (width // 28)
        head = [info.bos_id] + enc(text[:120])
        ids = np.array(head + [IMAGE_ID] * n + enc(" " + CAPTIONS[k]) + [info.eos_id], dtype=np.int32)
        segments.append(Segment(f"doc{d}", 0, ids, modality="interleaved",
                                images=((len(head), n, sha(jpegs[k]), height, width),)))
    sequences, current, room = [], [], seq_len
    for seg in segments:
        if len(seg.ids) > room:
            sequences.append((len(sequences), current))
            current, room = [], seq_len
        current.append(seg)
        room -= len(seg.ids)
    sequences.append((len(sequences), current))
    phase = root / "shards" / "pretrain"
    phase.mkdir(parents=True)
    name = shard_name(0, 1)
    with open(phase / name, "wb") as fh:
        counts = write_shard(fh, sequences, seq_len, info.pad_id, "pretrain")
    meta = manifest("pretrain", seq_len, seq_len, info.to_dict(), [{"file": name, **counts}], status="ok",
                    padding_target=1.0, chunks=len(segments), documents=len(segments), groups=1, min_group_tokens=0,
                    max_group_padding_rate=0.0, groups_above_target=0, seed=0)
    meta.update(image_token_id=IMAGE_ID, images=len(segments))
    (phase / MANIFEST).write_bytes(manifest_bytes(meta))
    write_store(root / "images" / "interleaved", jpegs)
    return {"sequences": len(sequences), "images": len(segments)}


TINY = {"d_model": 32, "n_layers": 2, "n_heads": 2, "vit_d_model": 32, "vit_layers": 1, "vit_heads": 2,
        "lr": 1e-2, "batch": 2, "log_every": 5, "eval_every": 0, "holdout_every": 5}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("multimodal_run")
    return root, write_multimodal_run(root)


def test_tiny_multimodal_run_trains_the_tower_and_reports_text_bpb(run, tmp_path):
    from trainer.loop import train

    root, counts = run
    lines = []
    cfg = {**TINY, "checkpoint_dir": str(tmp_path / "ckpt"), "checkpoint_every": 1, "keep_checkpoints": 30}
    out = train(str(root / "shards"), 20, "cpu", cfg, log=lines.append)
    losses = out["losses"]
    assert len(losses) == 20 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    # every training sequence has images: 20 steps x 2 sequences consume a few dozen
    assert out["images"] >= 20 and out["history"][-1]["images"] == out["images"]
    assert any(line.startswith("step") and f"images {out['images']}" in line for line in lines)
    held = out["heldout"]
    assert held["images"] > 0 and held["bytes"] > 0 and math.isfinite(held["bpb"]) and 0 < held["bpb"] < 20
    assert held["bpb"] == pytest.approx(held["nats"] / (math.log(2) * held["bytes"]))
    assert held["targets"] <= held["tokens"] - held["segments"] - 4 * held["images"]  # visual tokens: no targets
    routing = out["routing"]
    assert routing["muon"]["vision_tensors"] > 0 and routing["muon_headwise"]["vision_tensors"] == 2
    assert routing["sinkhorn"]["vision_tensors"] == 0
    assert any(line.startswith("vision tower") and "muon" in line for line in lines)
    assert out["model"]["vision"]["d_vit"] == 32
    first = torch.load(tmp_path / "ckpt" / "step-00000001.pt", weights_only=True)["model"]
    final = torch.load(tmp_path / "ckpt" / "step-00000020.pt", weights_only=True)
    last = final["model"]
    matrices = [n for n, p in last.items() if n.startswith("vision.") and p.ndim == 2]
    assert "vision.patch_proj.weight" in matrices and "vision.projector.fc1.weight" in matrices
    assert all(not torch.equal(first[n], last[n]) for n in matrices)
    assert IMAGE_ID in final["vocab_keep"]  # the compact vocabulary keeps the placeholder
    resumed = train(str(root / "shards"), 20, "cpu", {**cfg, "resume": str(tmp_path / "ckpt" / "step-00000012.pt"),
                                                      "checkpoint_dir": None}, log=None)
    assert resumed["losses"] == losses and resumed["images"] == out["images"]  # the tower resumes too


def test_cli_on_a_multimodal_run_and_without_its_store(run, tmp_path, capsys):
    from trainer.cli import main

    root, _ = run
    args = ["--steps", "3", "--d-model", "32", "--layers", "1", "--heads", "2", "--vit-d-model", "32",
            "--vit-layers", "1", "--vit-heads", "2", "--log-every", "1", "--eval-every", "0", "--holdout-every", "5"]
    assert main(["--shards", str(root), *args]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["images"] > 0 and summary["heldout_bpb"] > 0 and summary["routing"]["muon"]["vision_params"] > 0
    assert sum(line.startswith("step") and " images " in line for line in lines) == 3

    bare = tmp_path / "bare"  # the same shards, no image store
    shutil.copytree(root / "shards", bare / "shards")
    assert main(["--shards", str(bare / "shards" / "pretrain"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("curate train: the shards have image spans (pretrain 90)") and "--vision off" in err
    assert len(err.splitlines()) == 1
    assert main(["--shards", str(root), *args, "--vit-d-model", "30"]) == 2
    assert capsys.readouterr().err.strip() == ("curate train: --vit_heads: Value error, vit_d_model=30 must be a "
                                               "multiple of 4 and of vit_heads=2")
    assert main(["--shards", str(bare), "--vision", "off", *args]) == 0  # text-only on the same shards
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["images"] == 0 and summary["routing"]["muon"].get("vision_params") is None
    write_store(bare / "images" / "pairs", photos()[:3])  # a store that lacks two of the photos
    assert main(["--shards", str(bare), *args]) == 2
    assert "2 images of the shards are not in the image store" in capsys.readouterr().err


def test_open_shards_with_an_image_store_gives_each_span_its_pixels(run):
    """The reader's optional pixels: every span's image decoded and resized to the span's size, the
    same array the store gives (and the same as Pillow's own decode + BICUBIC resize)."""
    from packing import open_shards
    from packing.images import ImageStore

    root, counts = run
    by_sha = {sha(data): data for data in photos()}
    spans = [span for item in open_shards(str(root / "shards" / "pretrain"), image_store=ImageStore(str(root)))
             for span in item["images"]]
    assert len(spans) == counts["images"]
    for span in spans:
        assert span["pixels"].shape == (span["height"], span["width"], 3) and span["pixels"].dtype == np.uint8
        assert np.array_equal(span["pixels"], reference_pixels(by_sha[span["sha256"]], span["height"], span["width"]))
