"""`curate extract`'s page loop (pipelines/extract_pages.py): pages stepped in batches, lines in input order."""

from pathlib import Path

from pipelines.config import load_config
from pipelines.extract_pages import TextBranchSteps, stepped, warc_lines

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "configs" / "tiny.yaml")


def test_lines_keep_their_order_and_pages_are_stepped_in_batches():
    """A line without a page to step waits for the pages read before it; no batch exceeds `batch`; every
    page is stepped once."""
    lines = [{"url": "a", "raw": {"n": 1}}, {"url": "e", "text": None, "reason": "bad"}, {"url": "b", "raw": {"n": 2}},
             {"url": "c", "raw": {"n": 3}}, {"url": "f", "text": None, "reason": "bad"}, {"url": "d", "raw": {"n": 4}}]
    calls = []

    def steps(raws):
        calls.append([raw["n"] for raw in raws])
        return [(f"text {raw['n']}", None) if raw["n"] % 2 else (None, "odd_one") for raw in raws]

    out = list(stepped(iter(lines), steps, batch=2))
    assert [line["url"] for line in out] == ["a", "e", "b", "c", "f", "d"]
    assert calls == [[1, 2], [3, 4]]
    assert out[0] == {"url": "a", "text": "text 1", "reason": None}
    assert out[2] == {"url": "b", "text": None, "reason": "odd_one"}
    assert out[1] == lines[1] and all("raw" not in line for line in out)
    assert list(stepped(iter([lines[1]]), steps)) == [lines[1]]  # nothing to step: no call
    assert len(calls) == 2


def test_a_batch_ends_where_its_payloads_reach_the_byte_bound():
    """Large records are stepped in smaller batches: at most `batch_bytes` of payloads (and one record) wait."""
    lines = [{"url": str(k), "raw": {"payload": b"x" * size}} for k, size in enumerate((60, 50, 10, 200, 5, 5))]
    calls = []

    def steps(raws):
        calls.append([len(raw["payload"]) for raw in raws])
        return [("text", None)] * len(raws)

    out = list(stepped(iter(lines), steps, batch=10, batch_bytes=100))
    assert calls == [[60, 50], [10, 200], [5, 5]]
    assert [line["url"] for line in out] == [str(k) for k in range(6)]


def test_a_batch_of_pages_gets_what_each_page_gets_alone():
    """The steps over a batch (each step over all its pages in turn) give every page of a real WARC the text
    or the reason it gets stepped alone."""
    cfg = load_config(TINY)
    raws = [line["raw"] for line in warc_lines(str(ROOT / "sample" / "mixed-dev-slice.warc.gz"),
                                               cfg.read.max_record_bytes) if "raw" in line]
    steps = TextBranchSteps(cfg)
    together = steps(raws)
    alone = [steps([raw])[0] for raw in raws]
    assert together == alone
    assert sum(text is not None for text, _ in together) > 20 and any(reason for _, reason in together)
