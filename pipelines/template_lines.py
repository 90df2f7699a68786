"""Per-host template lines as a Beam transform (the rule and its defaults: filters/template_lines.py).

    documents ─┬─ Lines (one ParDo, each document's distinct line hashes computed once)
               │   ├─ pages: (host, page identity) -> its line hashes       one row per page of a host
               │   │     │ CombinePerKey(min)                                (copies of one page count once)
               │   │     ├─ (host, line hash) -> distinct pages             Count.PerElement (a CombinePerKey)
               │   │     │     └─ filter >= min_pages -> (host, (line hash, pages))
               │   │     └─ host -> distinct pages                          Count.PerElement
               │   │           CoGroupByKey by host (line hashes and one count: never documents)
               │   │           -> (host, frozenset of template hashes) for hosts that have any
               │   │                 └─ (host, template hash)
               │   └─ lines: (host, line hash) -> document id ──┐
               │                     CoGroupByKey by (host, line hash) ┘ -> (document id, template hash)
               └─ (document id, document) ──┐
                                 CoGroupByKey by document id ┘ -> RemoveLines
                                 -> each document without its template lines, score `template_lines`

Scale. Nothing global sits in one process: the template sets reach the documents through a join keyed
by (host, line hash), then one keyed by document id, so no worker holds more than one key's values (a
side input of every host's template set, as C4-style pipelines often use, would be GBs at web scale:
tens of millions of hosts). Hot keys hold small values: a menu line on 100k pages of one host is one
(host, line hash) key with 100k document ids; its counts are combiner-lifted (100k partial counts
summed before the shuffle); a big host's CoGroupByKey holds its candidate hashes and one count (lines
on >= min_pages pages only: most lines are on one page), never documents. The price is two shuffles of
every document's line hashes (8 bytes and an id each) and one of the documents.

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


class _Lines(beam.DoFn):
    """Each document with a host and a line: ((host, page identity), its distinct line hashes) for the
    counts, and ((host, line hash), document id) on "lines" for the removal join."""

    def process(self, doc):
        from filters.template_lines import host_of, line_hashes

        host = host_of(doc.get("url"))
        if host is None:
            return
        hashes = line_hashes(doc.get("text") or "")
        if not hashes:
            return
        identity = hashlib.blake2b(b"".join(h.to_bytes(8, "big") for h in hashes), digest_size=16).digest()
        yield (host, identity), hashes
        doc_id = doc["id"]
        for h in hashes:
            yield beam.pvalue.TaggedOutput("lines", ((host, h), doc_id))


def _host_templates(host_grouped, min_pages: int, min_share: float):
    from filters.template_lines import template_hashes

    host, grouped = host_grouped
    pages = sum(grouped["pages"])
    template = template_hashes(grouped["lines"], pages, min_pages, min_share)
    if template:
        yield host, template


def _lines_to_remove(element):
    """(document id, line hash) for every document holding a template line of its host."""
    (_, line), grouped = element
    if grouped["template"]:
        for doc_id in grouped["docs"]:
            yield doc_id, line


class _RemoveLines(beam.DoFn):
    """Each document without the template lines joined to its id; counts what it removed, per bundle."""

    def start_bundle(self):
        self.removed = self.changed = 0

    def process(self, element):
        from filters.template_lines import remove_template_lines

        _, grouped = element
        template = frozenset(grouped["remove"])
        for doc in grouped["doc"]:  # one document per id; the same record read twice would be two
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
        found = docs | "Lines" >> beam.ParDo(_Lines()).with_outputs("lines", main="pages")
        pages = found.pages | "DistinctPages" >> beam.CombinePerKey(min)  # equal identities: equal hash tuples
        line_pages = (pages | "HostLines" >> beam.FlatMap(lambda kv: ((kv[0][0], h) for h in kv[1]))
                      | "CountLinePages" >> beam.combiners.Count.PerElement()
                      | "Candidates" >> beam.Filter(lambda kv: kv[1] >= min_pages)
                      | "ByHost" >> beam.MapTuple(lambda host_hash, n: (host_hash[0], (host_hash[1], n))))
        host_pages = (pages | "Hosts" >> beam.MapTuple(lambda key, _: key[0])
                      | "CountHostPages" >> beam.combiners.Count.PerElement())
        templates = ({"lines": line_pages, "pages": host_pages} | "JoinHost" >> beam.CoGroupByKey()
                     | "Templates" >> beam.FlatMap(_host_templates, min_pages, min_share))
        template_lines = templates | "TemplateKeys" >> beam.FlatMap(lambda kv: (((kv[0], h), True) for h in kv[1]))
        to_remove = ({"template": template_lines, "docs": found.lines} | "JoinLines" >> beam.CoGroupByKey()
                     | "LinesToRemove" >> beam.FlatMap(_lines_to_remove))
        by_id = docs | "ById" >> beam.Map(lambda doc: (doc["id"], doc))
        res = ({"doc": by_id, "remove": to_remove} | "JoinDocs" >> beam.CoGroupByKey()
               | "RemoveLines" >> beam.ParDo(_RemoveLines()).with_outputs("counters", main="docs"))
        counters = [res.counters,
                    templates | "CountHosts" >> beam.Map(lambda _: ("template_lines/hosts", 1)),
                    templates | "CountTemplateLines" >> beam.MapTuple(lambda _, t: ("template_lines/template_lines",
                                                                                    len(t)))]
        return TemplateLines(res.docs, templates, counters | "Counters" >> beam.Flatten())
