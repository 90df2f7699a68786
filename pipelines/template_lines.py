"""Per-host template lines as a Beam transform (the rule and its defaults: filters/template_lines.py).

    documents ─┬─ (host, page identity) -> distinct line hashes   one row per distinct page of a host
               │     │ CombinePerKey(min)                         (copies of one page count once)
               │     ├─ (host, line hash) -> distinct pages       Count.PerElement (a CombinePerKey)
               │     │     └─ filter >= min_pages -> (host, (line hash, pages))
               │     └─ host -> distinct pages                    Count.PerElement
               │           CoGroupByKey by host (line hashes and one count: never documents)
               │           -> (host, frozenset of template hashes) for hosts that have any
               └─ RemoveLines (ParDo, the template sets as an AsDict side input)
                     -> each document without its host's template lines, score `template_lines`

Hot keys. The documents are never grouped: a host with 100k pages is no hot key, because each
document is streamed through one ParDo that looks its host up in the side input. What is shuffled
is small: per distinct page, its tuple of 8-byte line hashes (keyed by host and page identity: no hot
key); per (host, line), a count (combiner-lifted, so a menu line on 100k pages is 100k partial counts
summed before the shuffle); per host, the candidate lines (lines on >= min_pages pages only: most
lines are on one page) and one count, grouped by host. A big host's CoGroupByKey holds its candidate
hashes, ints, not documents. The side input holds every host's template set on each worker: bounded
per host by (distinct lines per page) / min_share once min_share binds, a few MB for this project's
corpora. At web scale (tens of millions of hosts) the side input would grow to GBs; the alternative
then is to key the removal by (host, line hash): each document emits (host, line hash) -> id, joined
with the template set to (id, line hash), then grouped by id with the document. It costs two more
shuffles of every line, and its hot keys (a menu line's 100k ids) are ids, not documents.

Deterministic: the template sets are functions of the input's multiset of documents (counts and set
membership), whatever the bundles or worker count, and each document's output depends on its text
and its host's set only.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import apache_beam as beam

from pipelines.stage import with_scores

SCORE = "template_lines"


class TemplateLines(NamedTuple):
    docs: beam.PCollection      # every document, template lines removed, with the `template_lines` score
    templates: beam.PCollection  # (host, frozenset of template line hashes), hosts with any
    counters: beam.PCollection  # ("template_lines/hosts", n), ("template_lines/lines_removed", n), ...


def _page(doc: dict):
    """((host, page identity), the page's distinct line hashes) for a document with a host."""
    from filters.template_lines import host_of, line_hashes

    host = host_of(doc.get("url"))
    if host is None:
        return
    hashes = line_hashes(doc.get("text") or "")
    if hashes:
        identity = hashlib.blake2b(b"".join(h.to_bytes(8, "big") for h in hashes), digest_size=16).digest()
        yield (host, identity), hashes


def _host_templates(host_grouped, min_pages: int, min_share: float):
    from filters.template_lines import template_hashes

    host, grouped = host_grouped
    pages = sum(grouped["pages"])
    template = template_hashes(grouped["lines"], pages, min_pages, min_share)
    if template:
        yield host, template


class _RemoveLines(beam.DoFn):
    """Each document without its host's template lines; counts what it removed, per bundle."""

    def start_bundle(self):
        self.removed = self.changed = 0

    def process(self, doc, templates):
        from filters.template_lines import host_of, remove_template_lines

        host = host_of(doc.get("url"))
        template = templates.get(host) if host is not None else None
        removed = 0
        if template:
            text, removed = remove_template_lines(doc["text"], template)
            if removed:
                doc = {**doc, "text": text}
                self.removed += removed
                self.changed += 1
        yield with_scores(doc, **{SCORE: float(removed)})

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.timestamp import MIN_TIMESTAMP
        from apache_beam.utils.windowed_value import WindowedValue

        for key, n in (("template_lines/lines_removed", self.removed), ("template_lines/docs_changed", self.changed)):
            if n:
                yield beam.pvalue.TaggedOutput("counters", WindowedValue((key, n), MIN_TIMESTAMP, [GlobalWindow()]))


class RemoveTemplateLines(beam.PTransform):
    """documents -> TemplateLines (see the module docstring)."""

    def __init__(self, min_pages: int, min_share: float):
        super().__init__()
        self.min_pages, self.min_share = min_pages, min_share

    def expand(self, docs):
        min_pages, min_share = self.min_pages, self.min_share
        pages = (docs | "Pages" >> beam.FlatMap(_page)
                 | "DistinctPages" >> beam.CombinePerKey(min))  # equal identities: equal hash tuples
        line_pages = (pages | "HostLines" >> beam.FlatMap(lambda kv: ((kv[0][0], h) for h in kv[1]))
                      | "CountLinePages" >> beam.combiners.Count.PerElement()
                      | "Candidates" >> beam.Filter(lambda kv: kv[1] >= min_pages)
                      | "ByHost" >> beam.MapTuple(lambda host_hash, n: (host_hash[0], (host_hash[1], n))))
        host_pages = (pages | "Hosts" >> beam.MapTuple(lambda key, _: key[0])
                      | "CountHostPages" >> beam.combiners.Count.PerElement())
        templates = ({"lines": line_pages, "pages": host_pages} | "JoinHost" >> beam.CoGroupByKey()
                     | "Templates" >> beam.FlatMap(_host_templates, min_pages, min_share))
        res = docs | "RemoveLines" >> beam.ParDo(_RemoveLines(), beam.pvalue.AsDict(templates)).with_outputs(
            "counters", main="docs")
        counters = [res.counters,
                    templates | "CountHosts" >> beam.Map(lambda _: ("template_lines/hosts", 1)),
                    templates | "CountTemplateLines" >> beam.MapTuple(lambda _, t: ("template_lines/template_lines",
                                                                                    len(t)))]
        return TemplateLines(res.docs, templates, counters | "Counters" >> beam.Flatten())
