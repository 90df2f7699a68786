"""ImagePairs on Beam (pipelines/image_pairs.py), FnApiRunner only: the ukwa Wikipedia capture with its images
inside the WARC (no network: name resolution and connects are made to fail), 1 vs 2 workers, and
synthetic pages around a real photo for exact/near duplicates, WARC opt-outs and fetching from
127.0.0.1 (refused by the default config, fetched with the guard relaxed)."""

import io
import json
import pickle
import socket

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from PIL import Image

from pipelines.image_pairs import IMAGE_SCHEMA, PAIR_SCHEMA, ImagePairs, ImagePairsConfig
from extract.images import image_record, read_pages_and_images
from tests.test_fetch import Handler, serve
from tests.test_images_decode import UKWA, encode, photo, ukwa_images

ONE_WORKER = ["--runner=FnApiRunner"]
TWO_WORKERS = ONE_WORKER + ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
pytestmark = pytest.mark.slow
FAST = {"phash": {"max_rounds": 4}, "embedding_dedup": {"max_rounds": 4}}  # small graphs converge in <= 2




def run_pairs(pages, images, config, tmp_path, args=ONE_WORKER):
    """-> (pairs, drops as (row, reason, detail), counters, image rows), each sorted."""
    def dump(name):
        def write(rows):
            (tmp_path / name).write_bytes(pickle.dumps(sorted(rows, key=repr)))
        return write

    cfg = {**config, **{k: {**v, **config.get(k, {})} for k, v in FAST.items()}}
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        res = ((p | "Pages" >> beam.Create(pages), p | "Images" >> beam.Create(images))
               | ImagePairs(ImagePairsConfig.model_validate(cfg)))
        for name, pcoll in res._asdict().items():
            if isinstance(pcoll, tuple):  # the drops, one PCollection per step that drops
                pcoll = pcoll | f"{name}All" >> beam.Flatten()
            pcoll | f"{name}List" >> beam.combiners.ToList() | f"{name}Dump" >> beam.Map(dump(name))
    load = lambda name: pickle.loads((tmp_path / name).read_bytes())  # noqa: E731
    return load("pairs"), load("dropped"), dict(load("counters")), load("images")


def reasons(drops):
    out = {}
    for _, reason, _ in drops:
        out[reason] = out.get(reason, 0) + 1
    return out


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_ukwa_main_page_pairs_from_the_warc(tmp_path, no_network):
    """Fetching on: every image is in the WARC, nothing is fetched."""
    pages, images = read_pages_and_images(UKWA)
    pairs, drops, counters, stored = run_pairs(pages, images, {"fetch": {"enabled": True}}, tmp_path)
    assert [(p["alt"], p["width"], p["height"], p["format"]) for p in pairs] == [("Emperor shrimp", 334, 250, "JPEG")]
    shrimp = pairs[0]
    assert shrimp["page_url"] == "http://en.wikipedia.org/wiki/Main_Page" and shrimp["position"] == 4
    assert shrimp["img_url"].startswith("http://upload.wikimedia.org/wikipedia/commons/thumb/a/ae/")
    assert "Periclimenes imperator" in shrimp["context_after"] and shrimp["warc_date"] == "2012-01-19T10:02:03Z"
    assert set(shrimp) == set(PAIR_SCHEMA.names) and dict(shrimp["scores"]) == {}
    assert reasons(drops) == {"declared_too_small": 15, "too_small": 1}  # the search button decodes to 12 px
    assert counters["in"] == 17 == counters["out"] + len(drops)
    assert counters["images/relevance/skipped_no_model"] == 1
    assert counters["images/from_warc"] == 2 and not any(k.startswith("images/fetch/") for k in counters)
    assert len(stored) == 1 and set(stored[0]) == set(IMAGE_SCHEMA.names)
    assert stored[0]["id"] == shrimp["image_sha256"] and stored[0]["bytes"] == photo()


def test_one_and_two_workers_give_identical_output(tmp_path):
    pages, images = read_pages_and_images(UKWA)
    config = {"min_side": 50, "fetch": {"enabled": False}}
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = run_pairs(pages, images, config, tmp_path / "one")
    two = run_pairs(pages, images, config, tmp_path / "two", TWO_WORKERS)
    assert one == two
    pairs, drops, counters, _ = one
    assert [p["alt"] for p in sorted(pairs, key=lambda p: p["position"])] == [
        "Nick Drake's grave in Tanworth-in-Arden", "John Acland in 1893", "Ma Ying-jeou", "Emperor shrimp"]
    assert reasons(drops) == {"declared_too_small": 11, "filename_alt": 1, "too_small": 1}
    assert counters["in"] == 17 and counters["out"] == 4


def page(n: int, imgs: list[tuple[str, str]], day: int) -> dict:
    body = "".join(f'<p>Paragraph {n}.{i} of a story about the sea.</p><img src="{src}" alt="{alt}">'
                   for i, (src, alt) in enumerate(imgs))
    return {"id": f"{n:032x}", "url": f"https://site{n}.example/story", "warc_file": "synthetic",
            "warc_date": f"2024-01-{day:02d}T00:00:00Z", "html": f"<html><body>{body}</body></html>"}


def test_duplicates_opt_outs_and_fetching(tmp_path):
    original = photo()                                                    # 334 x 250 JPEG
    src = Image.open(io.BytesIO(original)).convert("RGB")
    resized = encode(src.resize((200, 150), Image.Resampling.LANCZOS), "JPEG", quality=60)
    recompressed = encode(src, "JPEG", quality=30)
    drake = next(b for u, b in ukwa_images().items() if "Nick_Drake" in u)  # another real photo, 100 x 133
    Handler.files["/files/drake.jpg"] = encode(Image.open(io.BytesIO(drake)).resize((300, 399)), "JPEG")
    with serve() as base:
        pages = [page(1, [("https://a.example/shrimp.jpg", "An emperor shrimp riding a sea cucumber")], day=3),
                 page(2, [("https://b.example/shrimp-200.jpg", "Small emperor shrimp")], day=1),
                 page(3, [("https://c.example/shrimp-q30.jpg", "Emperor shrimp, low quality")], day=2),
                 page(4, [("https://a.example/shrimp.jpg", "The shrimp again on a second page")], day=4),
                 page(5, [("https://mirror.example/copy.jpg", "A mirrored emperor shrimp")], day=5),
                 page(6, [(f"{base}/files/drake.jpg", "The grave of Nick Drake")], day=6),
                 page(7, [("https://optout.example/art.jpg", "Digital painting of a lighthouse")], day=7)]
        records = [image_record("https://a.example/shrimp.jpg", 200, "image/jpeg", original),
                   image_record("https://b.example/shrimp-200.jpg", 200, "image/jpeg", resized),
                   image_record("https://c.example/shrimp-q30.jpg", 200, "image/jpeg", recompressed),
                   image_record("https://mirror.example/copy.jpg", 200, "image/jpeg", original),
                   image_record("https://optout.example/art.jpg", 200, "image/jpeg", recompressed, "noai"),
                   image_record("https://unused.example/x.jpg", 200, "image/jpeg", original)]
        (tmp_path / "default").mkdir()
        (tmp_path / "relaxed").mkdir()
        default = run_pairs(pages, records, {"fetch": {"enabled": True}}, tmp_path / "default")
        relaxed = run_pairs(pages, records, {"fetch": {"enabled": True, "allow_private": True, "retries": 0}},
                            tmp_path / "relaxed")

    pairs, drops, counters, stored = default
    by_page = {row["page_url"]: (reason, detail) for row, reason, detail in drops}
    assert [p["page_url"] for p in pairs] == ["https://site1.example/story"]  # the largest, then earliest
    survivor = pairs[0]["id"]
    assert by_page["https://site2.example/story"] == ("image_near_dup", survivor)    # resized copy
    assert by_page["https://site3.example/story"] == ("image_near_dup", survivor)    # recompressed copy
    assert by_page["https://site4.example/story"][0] == "image_exact_dup"            # same URL, later page
    assert by_page["https://site5.example/story"][0] == "image_exact_dup"            # same bytes elsewhere
    assert by_page["https://site6.example/story"][0] == "private_address"            # fetching on, private refused
    assert by_page["https://site7.example/story"][0] == "robots_noai"                # capture opted out
    assert counters["images/fetch/private_address"] == 1 and counters["images/warc_records_unreferenced"] == 1
    assert counters["images/near/clusters"] == 1 and counters["images/exact/clusters"] == 1
    assert counters["in"] == 7 == counters["out"] + len(drops)
    assert [s["id"] for s in stored] == [pairs[0]["image_sha256"]]

    pairs, drops, counters, stored = relaxed
    assert sorted(p["page_url"] for p in pairs) == ["https://site1.example/story", "https://site6.example/story"]
    drake_pair = next(p for p in pairs if p["page_url"].startswith("https://site6"))
    assert (drake_pair["width"], drake_pair["height"]) == (300, 399)
    assert counters["images/fetch/ok"] == 1 and len(stored) == 2
