"""Benchmark sequence packing (packing/bfd.py) on a real document-length distribution.

Resamples (seeded) a list of real per-document token counts to N documents, splits documents
longer than L into chunks (full L-token chunks + remainder), packs the chunks into sequences of
L tokens with ``pack_lengths`` (batched best-fit-decreasing plus exact-pair reservations, keeping
the better), with the plain batched BFD alone (``bfd_csr``), and, where N <= --reference-max, with
the pure-Python ``reference_bfd`` (Ding et al. 2024 segment tree) in the same process; checks that
plain BFD and the reference give identical packings; prints one JSON object.

    .venv/bin/python benchmarks/packing.py                       # N = 1M, L = 4096 / 8192 / 65536
    .venv/bin/python benchmarks/packing.py --n 1000000 10000000 --groups 30000 100000

Every run also packs in the pipeline's own groups (total tokens // ceil(2 / 1e-4) * L of them, chunks
assigned by a seeded hash, as packing/transforms.py does) and reports per-group padding and
sequences - lower bound ("pipeline_groups").

--groups G [G ...]: additionally pack in groups of ~G chunks (each chunk assigned to one of
ceil(chunks / G) groups by a seeded hash of its index) and report, per G, the worst per-group
padding rate and whether every group used at most ceil(group tokens / L) + 1 sequences.

--jitter F: smoothed bootstrap (each resampled length times exp(F * N(0,1)), rounded). The
2,701-document sample has only ~1,700 distinct lengths (smallest 8); a plain resample of it keeps
that coarse grid, which leaves 1-28-token gaps no remaining chunk can fill in 20-30% of the sequences
and holds plain BFD's padding at ~1.2-1.6e-4 for L = 4K/8K; the reservations bring it under 1e-4.
Real corpora have every length; --jitter 0.02 approximates that (padding then ~3-8e-6).

Multimodal case (--multimodal-ratio R, default 7; 0 = off): the same text documents plus interleaved
documents holding 1-6 images of 400-2,304 visual tokens each (sides drawn in [560, 2000] px and resized
by the vision policy, packing/vision.py) between text runs drawn from the same real lengths, as many as
make text : multimodal tokens = R : 1. Over-long documents are cut at L tokens, or right before an image
block that a cut at L would split (packing/chunk.py's rule with no text boundaries, checked against
chunk_ends on the first documents), so blocks stay whole; the chunks are packed as above ("multimodal").

The lengths file (default ../shared/data/web_text/doc_token_lengths.json, only present on dev
machines) is either a JSON list of ints or an object holding one (e.g. {"n_tokens_gpt2": [...]}).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path[0] = str(Path(__file__).resolve().parents[1])  # repo root, not benchmarks/ (its packing.py would shadow the package)

from benchmarks.record import record  # noqa: E402

from packing.bfd import bfd_csr, pack_lengths, pack_lengths_csr, reference_bfd  # noqa: E402
from packing.chunk import INSIDE_IMAGE, PARAGRAPH, TOKEN, chunk_ends  # noqa: E402
from packing.vision import visual_tokens  # noqa: E402

DEFAULT_LENGTHS = Path(__file__).resolve().parents[2] / "shared" / "data" / "web_text" / "doc_token_lengths.json"
PADDING_TARGET = 1e-4
SPEEDUP_TARGET = 5.0


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def load_lengths(path: Path) -> tuple[np.ndarray, str]:
    data = json.loads(Path(path).read_text())
    key = None
    if isinstance(data, dict):
        cands = [k for k, v in data.items() if isinstance(v, list) and v and all(isinstance(x, int) for x in v)]
        if not cands:
            raise SystemExit(f"{path}: no list of ints found (keys: {sorted(data)})")
        key = "n_tokens_gpt2" if "n_tokens_gpt2" in cands else cands[0]
        data = data[key]
    arr = np.asarray(data, dtype=np.int64)
    if arr.ndim != 1 or arr.size == 0 or (arr <= 0).any():
        raise SystemExit(f"{path}: expected a non-empty list of positive ints")
    return arr, key or "<list>"


def timed(fn, repeat: int):
    """(result of the last call, min wall time over `repeat` calls); cyclic GC paused while timing."""
    best = float("inf")
    res = None
    for _ in range(max(1, repeat)):
        res = None
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            res = fn()
            best = min(best, time.perf_counter() - t0)
        finally:
            gc.enable()
    return res, best


def split_docs(doc_lens: np.ndarray, L: int) -> np.ndarray:
    """Chunk lengths in document order: each doc -> (len // L) chunks of L, then the remainder if > 0."""
    n_full = doc_lens // L
    rem = doc_lens - n_full * L
    n_chunks = n_full + (rem > 0)
    out = np.full(int(n_chunks.sum()), L, dtype=np.int64)
    last = np.cumsum(n_chunks) - 1
    has_rem = rem > 0
    out[last[has_rem]] = rem[has_rem]
    return out


def splitmix64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def check_csr(chunks: np.ndarray, items: np.ndarray, offsets: np.ndarray, L: int) -> dict:
    """Verify a packing and return its figures (vectorized; raises on an invalid packing)."""
    n = chunks.size
    cnt = np.bincount(items, minlength=n) if items.size else np.zeros(n, np.int64)
    if items.size != n or cnt.size != n or (n and (cnt.min() != 1 or cnt.max() != 1)):
        raise AssertionError("packing does not use every chunk exactly once")
    nseq = offsets.size - 1
    per_seq = np.add.reduceat(chunks[items], offsets[:-1]) if nseq else np.zeros(0, np.int64)
    if nseq and (per_seq.max() > L or np.diff(offsets).min() < 1):
        raise AssertionError("a sequence is over-full or empty")
    total = int(chunks.sum())
    return {
        "sequences": int(nseq),
        "padding_rate": (nseq * L - total) / (nseq * L) if nseq else 0.0,
    }


def lists_to_csr(bins: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    offsets = np.zeros(len(bins) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    items = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=int(offsets[-1]))
    return items, offsets


def run_groups(chunks: np.ndarray, L: int, G: int, seed: int) -> dict:
    n = chunks.size
    ngroups = max(1, round(n / G))
    gid = (splitmix64(np.arange(n, dtype=np.uint64) ^ np.uint64(seed * 0x2545F4914F6CDD1D % 2**64)) % np.uint64(ngroups)).astype(np.int64)
    order = np.argsort(gid, kind="stable")
    bounds = np.searchsorted(gid[order], np.arange(ngroups + 1))
    pads, excess, sizes, toks = [], [], [], []
    t0 = time.perf_counter()
    for g in range(ngroups):
        sub = chunks[order[bounds[g] : bounds[g + 1]]]
        items, offsets = pack_lengths_csr(sub, L)
        f = check_csr(sub, items, offsets, L)
        tot = int(sub.sum())
        lb = -(-tot // L)
        pads.append(f["padding_rate"])
        excess.append(f["sequences"] - lb)
        sizes.append(sub.size)
        toks.append(tot)
    dt = time.perf_counter() - t0
    pads_a, exc_a = np.asarray(pads), np.asarray(excess)
    return {
        "group_size_target": round(G),
        "groups": ngroups,
        "chunks_per_group": {"min": int(min(sizes)), "mean": float(np.mean(sizes)), "max": int(max(sizes))},
        "tokens_per_group": {"min": int(min(toks)), "mean": float(np.mean(toks)), "max": int(max(toks))},
        "max_padding_rate": float(pads_a.max()),
        "mean_padding_rate": float(pads_a.mean()),
        "groups_over_padding_target": int((pads_a > PADDING_TARGET).sum()),
        "max_sequences_minus_lower_bound": int(exc_a.max()),
        "all_groups_within_lower_bound_plus_1": bool((exc_a <= 1).all()),
        "groups_at_lower_bound": int((exc_a == 0).sum()),
        "pack_seconds_total": round(dt, 3),
    }


def multimodal_docs(base: np.ndarray, text_tokens: int, ratio: float, rng) -> list[tuple[int, list]]:
    """(length, [(block start, block tokens), ...]) of interleaved documents worth text_tokens / ratio
    tokens: text runs resampled from `base`, images of 400-2,304 visual tokens between them."""
    docs, total = [], 0
    while total < text_tokens / ratio:
        n_images = int(rng.integers(1, 7))
        runs = rng.choice(base, size=n_images + 1) // (n_images + 1) + 1
        at, blocks = int(runs[0]), []
        for k in range(n_images):
            w, h = (int(v) for v in rng.integers(560, 2001, size=2))
            tokens = visual_tokens(w, h)
            blocks.append((at, tokens))
            at += tokens + int(runs[k + 1])
        docs.append((at, blocks))
        total += at
    return docs


def cut_blocks(length: int, blocks: list, L: int) -> list[int]:
    """Chunk ends of a document with atomic image blocks, as chunk_ends places them with no text
    boundaries: the latest block edge in the window (start + L - W, start + L], else start + L, or
    right before the block a cut there would split."""
    ends, start, w = [], 0, min(4096, L // 8)
    spans = [(a, a + n) for a, n in blocks]
    edges = sorted({e for span in spans for e in span})
    while length - start > L:
        cut = start + L
        in_window = [e for e in edges if cut - w < e <= cut]
        if in_window:
            cut = in_window[-1]
        else:
            inside = next((a for a, b in spans if a < cut < b), None)
            if inside is not None:
                if inside <= start:
                    raise ValueError(f"an image block longer than L={L}")
                cut = inside
        ends.append(cut)
        start = cut
    ends.append(length)
    return ends


def reference_cuts(length: int, blocks: list, L: int) -> list[int]:
    edges = {e for a, n in blocks for e in (a, a + n)}

    def boundary(p):
        return PARAGRAPH if p in edges else INSIDE_IMAGE if any(a < p < a + n for a, n in blocks) else TOKEN
    return chunk_ends(length, L, 4096, boundary)


def bench_one(docs: np.ndarray, L: int, args, mm_docs: list | None = None) -> dict:
    chunks = split_docs(docs, L)
    if mm_docs is not None:
        mm_chunks = []
        for k, (length, blocks) in enumerate(mm_docs):
            ends = cut_blocks(length, blocks, L)
            if k < 300 and ends != reference_cuts(length, blocks, L):
                raise AssertionError(f"image-aware cuts differ from chunk_ends on document {k}")
            mm_chunks += [b - a for a, b in zip([0] + ends, ends)]
        chunks = np.concatenate([chunks, np.asarray(mm_chunks, dtype=np.int64)])
    n = chunks.size
    total = int(chunks.sum())
    lb = -(-total // L)
    res: dict = {
        "N_docs": int(docs.size) + (len(mm_docs) if mm_docs is not None else 0),
        "L": L,
        "chunks": int(n),
        "tokens": total,
        "lower_bound": lb,
        "distinct_chunk_lengths": int(np.unique(chunks).size),
    }
    log(f"[N={docs.size:,} L={L}] {n:,} chunks, {total:,} tokens")

    # fast packer: the list API (what callers get) and the array API
    bins, t_list = timed(lambda: pack_lengths(chunks, L), args.repeat)
    (items, offsets), t_csr = timed(lambda: pack_lengths_csr(chunks, L), args.repeat)
    f = check_csr(chunks, items, offsets, L)
    it2, off2 = lists_to_csr(bins)
    if not (np.array_equal(it2, items) and np.array_equal(off2, offsets)):
        raise AssertionError("pack_lengths and pack_lengths_csr disagree")
    res["fast"] = {
        "sequences": f["sequences"],
        "padding_rate": f["padding_rate"],
        "sequences_minus_lower_bound": f["sequences"] - lb,
        "meets_padding_target": f["padding_rate"] <= PADDING_TARGET,
        "seconds": round(t_list, 4),
        "chunks_per_s": round(n / t_list),
        "csr_seconds": round(t_csr, 4),
        "csr_chunks_per_s": round(n / t_csr),
    }
    log(f"  fast: {t_list:.3f}s (list) {t_csr:.3f}s (csr), {f['sequences']:,} seqs, padding {f['padding_rate']:.3g}")
    (bi, bo), t_bfd = timed(lambda: bfd_csr(chunks, L), args.repeat)
    fb = check_csr(chunks, bi, bo, L)
    res["plain_bfd"] = {
        "sequences": fb["sequences"],
        "padding_rate": fb["padding_rate"],
        "sequences_minus_lower_bound": fb["sequences"] - lb,
        "seconds": round(t_bfd, 4),
        "chunks_per_s": round(n / t_bfd),
    }
    log(f"  plain BFD: {t_bfd:.3f}s, {fb['sequences']:,} seqs, padding {fb['padding_rate']:.3g}")

    if res["N_docs"] <= args.reference_max:
        ref, t_ref = timed(lambda: reference_bfd(chunks, L), args.repeat)
        ri, ro = lists_to_csr(ref)
        rf = check_csr(chunks, ri, ro, L)
        identical = bool(np.array_equal(ri, bi) and np.array_equal(ro, bo))
        del ref
        res["reference"] = {
            "sequences": rf["sequences"],
            "padding_rate": rf["padding_rate"],
            "seconds": round(t_ref, 3),
            "chunks_per_s": round(n / t_ref),
            "identical_to_plain_bfd": identical,
        }
        res["speedup"] = round(t_ref / t_list, 2)
        res["speedup_csr"] = round(t_ref / t_csr, 2)
        log(f"  reference: {t_ref:.2f}s, identical to plain BFD={identical}, speedup {t_ref / t_list:.1f}x")
    else:
        res["reference"] = f"not run: N_docs > --reference-max={args.reference_max}"
    del bins, items, offsets, it2, off2, bi, bo
    gc.collect()

    # the pipeline's own grouping (packing/transforms.py): total // min_group_tokens groups, with
    # min_group_tokens = ceil(2 / padding target) * L
    ngroups = max(1, total // (int(np.ceil(2 / PADDING_TARGET)) * L))
    res["pipeline_groups"] = run_groups(chunks, L, n / ngroups, args.seed)
    log(f"  pipeline groups ({ngroups}): max padding {res['pipeline_groups']['max_padding_rate']:.3g}, "
        f"max excess {res['pipeline_groups']['max_sequences_minus_lower_bound']}")

    if args.groups:
        res["groups"] = []
        for G in args.groups:
            if G >= n:
                continue
            g = run_groups(chunks, L, G, args.seed)
            log(f"  groups G={G:,}: max padding {g['max_padding_rate']:.3g}, max excess {g['max_sequences_minus_lower_bound']}")
            res["groups"].append(g)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=Path, default=DEFAULT_LENGTHS, help="JSON file of per-document token counts (default: %(default)s)")
    ap.add_argument("--n", type=int, nargs="+", default=[1_000_000], help="numbers of documents to resample (default: 1000000)")
    ap.add_argument("--seq-len", type=int, nargs="+", default=[4096, 8192, 65536])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference-max", type=int, default=2_000_000, help="run reference_bfd only where N_docs <= this (default 2M)")
    ap.add_argument("--groups", type=int, nargs="*", default=[], help="also pack in hash-assigned groups of ~G chunks")
    ap.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        help="smoothed bootstrap: multiply each resampled length by exp(F * N(0,1)) and round (default 0: plain resample)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="time each packer this many times, report the minimum (default 1)")
    ap.add_argument("--multimodal-ratio", type=float, default=7.0,
                    help="text : multimodal tokens of the multimodal case (default 7, the report's; 0 = skip it)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)

    if not args.lengths.exists():
        raise SystemExit(f"lengths file not found: {args.lengths} (pass --lengths PATH)")
    base, key = load_lengths(args.lengths)
    rng = np.random.default_rng(args.seed)
    out: dict = {
        "benchmark": "packing/bfd.py pack_lengths (best-fit-decreasing + exact-pair reservations)",
        "lengths_file": str(args.lengths),
        "lengths_key": key,
        "source_docs": int(base.size),
        "source_stats": {
            "median": float(np.median(base)),
            "mean": float(base.mean()),
            "max": int(base.max()),
        },
        "seed": args.seed,
        "jitter": args.jitter,
        "reference_max": args.reference_max,
        "timing": "wall time of one call (min over --repeat calls), same process and input for both packers, "
        "cyclic GC paused during each timed call for both; seconds include sorting and building the output lists",
        "repeat": args.repeat,
        "env": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpu_count": os.cpu_count(),
            "machine": platform.machine(),
        },
        "results": [],
    }
    for N in args.n:
        docs = rng.choice(base, size=N, replace=True)
        if args.jitter > 0:
            docs = np.maximum(1, np.rint(docs * np.exp(args.jitter * rng.standard_normal(N)))).astype(np.int64)
        for L in args.seq_len:
            out["results"].append(bench_one(docs, L, args))
        if args.multimodal_ratio > 0:
            mm = multimodal_docs(base, int(docs.sum()), args.multimodal_ratio, rng)
            images = [n for _, blocks in mm for _, n in blocks]
            for L in args.seq_len:
                r = bench_one(docs, L, args, mm)
                r["multimodal"] = {"documents": len(mm), "tokens": int(sum(n for n, _ in mm)), "images": len(images),
                                   "visual_tokens": {"min": min(images), "max": max(images),
                                                     "mean": float(np.mean(images))},
                                   "text_to_multimodal": int(docs.sum()) / sum(n for n, _ in mm)}
                out.setdefault("results_multimodal", []).append(r)

    rs = out["results"] + out.get("results_multimodal", [])
    with_ref = [r for r in rs if "speedup" in r]
    out["targets"] = {
        "padding_le_1e-4_all": all(r["fast"]["padding_rate"] <= PADDING_TARGET for r in rs),
        "sequences_le_lower_bound_plus_1_all": all(r["fast"]["sequences_minus_lower_bound"] <= 1 for r in rs),
        "groups_within_lower_bound_plus_1_all": all(g["all_groups_within_lower_bound_plus_1"] for r in rs for g in r.get("groups", [])),
        "pipeline_groups_within_lower_bound_plus_1_all": all(r["pipeline_groups"]["all_groups_within_lower_bound_plus_1"] for r in rs),
        "pipeline_groups_padding_le_1e-4_all": all(r["pipeline_groups"]["max_padding_rate"] <= PADDING_TARGET for r in rs),
        "speedup_ge_5_all": bool(with_ref) and all(r["speedup"] >= SPEEDUP_TARGET for r in with_ref),
        "min_speedup": min((r["speedup"] for r in with_ref), default=None),
        "plain_bfd_identical_to_reference_all": all(r["reference"]["identical_to_plain_bfd"] for r in with_ref),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    headline = {}
    for kind, results in (("text", out["results"]), ("multimodal", out.get("results_multimodal", []))):
        for r in results:
            groups = r["pipeline_groups"]
            headline[f"{kind}, {r['L']:,}"] = (
                f"{r.get('speedup', '-')}x the pure-Python BFD, padding {r['fast']['padding_rate']:.2g}; pipeline groups "
                f"{groups['groups_over_padding_target']} of {groups['groups']} over 1e-4 (max {groups['max_padding_rate']:.2g})")
    record(__file__, headline, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
