"""NearDedup on Beam (dedup/near.py): synthetic clusters with a chain, verification, survivor rules,
a brute-force check on real pages, 1 vs 2 workers, and a single 50k-member bucket."""

import itertools
import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from dedup.minhash import jaccard, shingles
from dedup.near import (NearDedup, NearDedupConfig, _BucketStar, _Decide, _HubToLeaves, _LargeStar,
                        _SmallStar, size_bin)
from tests.test_minhash import edit, real_texts

ROOT = Path(__file__).resolve().parents[1]
ONE_WORKER = ["--runner=FnApiRunner"]
# Every graph below converges in <= 2 rounds; fewer unrolled rounds keep the pipelines short.
ROUNDS = {"max_rounds": 4}
TWO_WORKERS = ONE_WORKER + ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _dump(path):
    def write(rows):
        Path(path).write_text(json.dumps(rows))
    return write


def run_near(docs, tmp_path, config=None, args=ONE_WORKER):
    """Run NearDedup on `docs`; returns (kept docs by id, {dropped id: (survivor, size)}, counters)."""
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        res = p | beam.Create(docs) | NearDedup(NearDedupConfig.model_validate({**ROUNDS, **(config or {})}))
        res.docs | "KeptList" >> beam.combiners.ToList() | "KeptWrite" >> beam.Map(_dump(tmp_path / "kept.json"))
        (res.duplicates | "Dup" >> beam.MapTuple(lambda doc, survivor, size: (doc["id"], survivor, size))
         | "DupList" >> beam.combiners.ToList() | "DupWrite" >> beam.Map(_dump(tmp_path / "dups.json")))
        (res.counters | "CountList" >> beam.combiners.ToList()
         | "CountWrite" >> beam.Map(_dump(tmp_path / "counters.json")))
    kept = {d["id"]: d for d in json.loads((tmp_path / "kept.json").read_text())}
    dups = {doc_id: (survivor, size) for doc_id, survivor, size in json.loads((tmp_path / "dups.json").read_text())}
    return kept, dups, dict(json.loads((tmp_path / "counters.json").read_text()))


def words(seed: int, n: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(f"w{k}" for k in rng.integers(0, 20_000, size=n))


def chain():
    """a ~ b and b ~ c at the default threshold, but a !~ c."""
    a = words(1, 300)
    b = edit(a, 0.06, 11)
    c = edit(b, 0.06, 12)
    sa, sb, sc = shingles(a), shingles(b), shingles(c)
    assert jaccard(sa, sb) >= 0.5 and jaccard(sb, sc) >= 0.5 and jaccard(sa, sc) < 0.5
    return a, b, c


def synthetic_docs():
    a, b, c = chain()
    d = words(2, 120)
    return [
        # ids make the chain's end the survivor, so a reaches it only through b
        {"id": "id-c", "text": a, "url": "http://a", "lang": "en"},
        {"id": "id-z", "text": b, "url": "http://b", "lang": "en"},
        {"id": "id-a", "text": c, "url": "http://c", "lang": "en"},
        {"id": "id-d", "text": d, "url": "http://d", "lang": "en", "multimodal": False},
        {"id": "id-e", "text": d.upper().replace(" ", ", "), "url": "http://e", "lang": "en", "multimodal": True},
        {"id": "id-f", "text": words(3, 200), "url": "http://f", "lang": "en"},
        {"id": "id-g", "text": "", "url": "http://g", "lang": "en"},
        {"id": "id-h", "text": "short", "url": "http://h", "lang": "en"},
    ]


def test_clusters_chain_and_survivors(tmp_path):
    docs = synthetic_docs()
    kept, dups, counters = run_near(docs, tmp_path)
    assert dups == {"id-c": ("id-a", 3), "id-z": ("id-a", 3), "id-e": ("id-d", 2)}
    assert kept == {d["id"]: d for d in docs if d["id"] not in dups}  # passed through unchanged
    assert counters["near/clusters"] == 2
    assert counters["near/cluster_size/2"] == counters["near/cluster_size/3"] == 1
    assert counters["near/candidate_pairs"] >= counters["near/verified_pairs"] >= 3
    assert counters["near/buckets"] > 0
    assert not any(k.startswith(("in", "out", "dropped/")) for k in counters)


def prefer_multimodal(doc):
    return not doc.get("multimodal", False)


def test_survivor_rule_is_pluggable(tmp_path):
    kept, dups, _ = run_near(synthetic_docs(), tmp_path, {"survivor": prefer_multimodal})
    assert dups["id-d"] == ("id-e", 2) and "id-e" in kept
    assert dups["id-c"] == ("id-a", 3)  # no member is multimodal: smallest id


def test_verification_keeps_lsh_false_positives(tmp_path):
    base = words(4, 200)
    docs = [{"id": "x", "text": base}, {"id": "y", "text": edit(base, 0.12, 5)}]
    assert 0.2 < jaccard(shingles(docs[0]["text"]), shingles(docs[1]["text"])) < 0.5
    # one row per band: nearly every pair above J ~ 0.1 becomes a candidate
    loose = {"bands": 96, "rows": 1, "max_rounds": 2}
    kept, dups, counters = run_near(docs, tmp_path, loose)
    assert set(kept) == {"x", "y"} and counters["near/candidate_pairs"] == 1 and counters["near/verified_pairs"] == 0
    kept, dups, counters = run_near(docs, tmp_path, {**loose, "verify": False})
    assert dups == {"y": ("x", 2)} and "near/verified_pairs" not in counters


def real_corpus():
    """The mini WARC's real pages plus near-duplicates of them made the way syndicated copies look:
    scattered edits, an appended paragraph from another page, and a chain of edits."""
    pages = [{"id": doc_id, "text": text} for doc_id, text in real_texts()]
    long_pages = [p for p in pages if len(p["text"].split()) > 120]
    copies = []
    for i, page in enumerate(long_pages[:8]):
        extra = long_pages[-1 - i]["text"].split("\n")[0]
        copies.append({"id": f"copy{i}-{page['id'][:6]}", "text": edit(page["text"], 0.04, i) + "\n\n" + extra})
    step = long_pages[9]["text"]
    for k in range(3):
        step = edit(step, 0.05, 100 + k)
        copies.append({"id": f"chain{k}", "text": step})
    return pages + copies


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    docs = real_corpus()
    return docs, run_near(docs, tmp_path_factory.mktemp("one"))


def test_brute_force_no_two_kept_documents_are_similar(real_run):
    docs, (kept, dups, counters) = real_run
    t = NearDedupConfig().threshold
    sets = {d["id"]: shingles(d["text"]) for d in docs}
    cluster = {doc_id: survivor for doc_id, (survivor, _) in dups.items()}
    similar = [(a, b) for a, b in itertools.combinations(sorted(sets), 2) if jaccard(sets[a], sets[b]) >= t]
    assert len(similar) > 12
    for a, b in similar:
        assert not (a in kept and b in kept), (a, b)
        assert cluster.get(a, a) == cluster.get(b, b), (a, b)  # every similar pair ends in one cluster
    assert set(kept) | set(dups) == set(sets) and not set(kept) & set(dups)
    sizes = {}
    for survivor, size in dups.values():
        assert survivor in kept  # no cluster loses all its members
        sizes.setdefault(survivor, set()).add(size)
    for survivor, size in sizes.items():
        assert size == {1 + sum(1 for s, _ in dups.values() if s == survivor)}
        assert survivor == min([survivor] + [d for d, (s, _) in dups.items() if s == survivor])
    assert counters["near/clusters"] == len(sizes)


def test_one_and_two_workers_give_identical_output(real_run, tmp_path):
    docs, (kept, dups, counters) = real_run
    kept2, dups2, counters2 = run_near(docs, tmp_path, args=TWO_WORKERS)
    assert kept2 == kept and dups2 == dups and counters2 == counters


def test_unconverged_components_fail_the_run(tmp_path):
    a, b, c = chain()
    docs = [{"id": "2", "text": a}, {"id": "3", "text": b}, {"id": "1", "text": c}]
    with pytest.raises(Exception, match="not converged after 0 rounds"):  # a path needs 2 rounds
        run_near(docs, tmp_path, {"max_rounds": 0})


class Reiterable:
    """A group too large to hold: every pass regenerates its members."""

    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return self.make()


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        for _ in fn():
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_hot_groups_stream_in_constant_memory():
    n = 50_000
    ids = Reiterable(lambda: (f"{i:012d}" for i in range(n, 0, -1)))
    hub_set = np.arange(50_000, dtype=np.uint64).tobytes()
    hub = Reiterable(lambda: itertools.chain(((1, f"leaf{i}") for i in range(n // 2)), [(0, hub_set)],
                                             ((1, f"leaf{i}") for i in range(n // 2, n))))
    keys = Reiterable(lambda: (((), f"{i:012d}", "f.warc.gz", i) for i in range(n)))
    for name, run in [("bucket", lambda: _BucketStar().process(("key", ids))),
                      ("large-star", lambda: _LargeStar().process(("000000000005", ids))),
                      ("small-star", lambda: _SmallStar().process((f"{n + 1:012d}", ids))),
                      ("hub", lambda: _HubToLeaves().process(("hub", hub))),
                      ("survivor", lambda: _Decide("near/").process(("root", keys)))]:
        assert peak_bytes(run) < 2 << 20, name  # 50k members, < 2 MiB: nothing is collected


HOT_BUCKET = textwrap.dedent("""
    import json, sys
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from dedup.near import NearDedup, NearDedupConfig

    N, OUT = int(sys.argv[1]), sys.argv[2]
    BASE = "Breaking: the city council approved the new budget for parks and schools on Monday night"

    def variants(block):
        # near-identical: case, punctuation and spacing differ, so every band of every doc collides
        for i in range(block * 1000, min(N, block * 1000 + 1000)):
            text = BASE.upper() if i % 3 == 0 else BASE.replace(" ", "  ") + "!" * (i % 5)
            yield {"id": f"{i:08d}", "text": text, "url": f"http://site{i}.example/news"}

    def dump(name):
        return lambda rows: open(f"{OUT}/{name}.json", "w").write(json.dumps(rows))

    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        res = (p | beam.Create(range((N + 999) // 1000)) | beam.FlatMap(variants)
               | NearDedup(NearDedupConfig(num_perm=16, bands=4, rows=4, max_rounds=2)))
        res.docs | "K" >> beam.Map(lambda d: d["id"]) | "KL" >> beam.combiners.ToList() | "KW" >> beam.Map(dump("kept"))
        (res.duplicates | "D" >> beam.MapTuple(lambda d, s, n: (s, n)) | beam.combiners.Count.PerElement()
         | "DL" >> beam.combiners.ToList() | "DW" >> beam.Map(dump("dups")))
        res.counters | "CL" >> beam.combiners.ToList() | "CW" >> beam.Map(dump("counters"))
    # this process's own peak (getrusage's ru_maxrss would start from the parent's peak at the fork)
    print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) / 1024)
""")


def test_one_bucket_of_30k_near_identical_documents(tmp_path):
    """Every band of 30k documents is one bucket: 4 buckets of 30k (4 bands and 30k keep CI time down;
    more only repeat them), one hub with 30k edges, one 30k-member cluster. Our DoFns add O(1)
    memory per group (test above); the rest is the runner's own buffering (FnApiRunner keeps each
    PCollection in memory), measured here as the child process's peak RSS."""
    n = 30_000
    out = subprocess.run([sys.executable, "-c", HOT_BUCKET, str(n), str(tmp_path)], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rss = float(out.stdout.split()[-1])
    kept, dups, counters = (json.loads((tmp_path / f"{name}.json").read_text())
                            for name in ("kept", "dups", "counters"))
    counters = dict(counters)
    assert kept == ["00000000"]
    assert dups == [[["00000000", n], n - 1]]
    assert counters["near/buckets"] == 4 and counters["near/candidate_pairs"] == n - 1
    assert counters["near/clusters"] == 1 and counters[f"near/cluster_size/{size_bin(n)}"] == 1
    print(f"peak RSS with one {n}-member bucket: {rss:.0f} MiB")
    assert rss < 1500


def test_config_is_checked():
    assert NearDedupConfig(bands=None, rows=None, threshold=0.8, num_perm=128).bands == 9
    with pytest.raises(ValueError, match="treshold\n  Extra inputs are not permitted"):
        NearDedupConfig.model_validate({"treshold": 0.5})
    with pytest.raises(ValueError, match="num_perm"):
        NearDedupConfig(bands=40, rows=3)
    assert [size_bin(n) for n in (2, 3, 4, 5, 8, 9, 16, 17, 50_000)] == \
        ["2", "3", "4", "5-8", "5-8", "9-16", "9-16", "17-32", "32769-65536"]
