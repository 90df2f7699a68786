"""A web page as an interleaved document: text blocks and images in DOM order (no Beam here).

OBELICS (Laurençon et al. 2023, sec. 3.2 and its `simplification`/`linearization` code) simplifies the
DOM, then walks it, cutting the text where an image sits. We do the same walk with three differences
the interleaved branch needs:
- `<figure>`/`<figcaption>`, list items and table cells are kept as text (OBELICS's released code drops
  figure captions), and an image inside a `<figure>` carries that figure's caption, the candidate
  caption when its document is recycled into pairs;
- page chrome is cut by element, not by text statistics: `nav`, `header`, `footer`, forms,
  scripts, hidden elements (`hidden`, `aria-hidden="true"`, inline `display:none`); the images inside
  them come back as `chrome_images`, so every `<img>` of the page is accounted for;
- the text itself comes from resiliparse's plain-text extractor in one native call, with a marker where
  each image was, so the Python work per page is per image and figure, not per DOM node, and linear in
  the page (`linearise`).

Images are the pairs branch's `ImageRef`s (extract/images.py: `<picture>`/`srcset`/lazy-loading URL
choice, `<base href>`, canonical URLs), so the same URL rules (`check_image_ref`) apply to both.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import ELEMENT, HTMLTree

from extract.images import MARKER, MARKER_START, ImageRef, add_contexts, image_refs, without_marker_lookalikes

# Subtrees that are page chrome, code or controls, not content.
# (script, style, noscript and template the extractor skips by itself; `area` is the one element besides
# `img` whose alt text it renders.)
CHROME = ("nav", "header", "footer", "form", "button", "select", "textarea", "iframe", "object", "embed", "canvas",
          "svg", "audio", "video", "map", "area", "dialog")
HIDDEN = '[hidden], [aria-hidden="true" i], [style*="none" i], [style*="hidden" i]'  # then checked exactly
# Both in one selector list: one walk of the tree finds every element to remove (a lookup per tag would walk
# it once per tag).
REMOVED = ", ".join(CHROME) + ", " + HIDDEN
CHROME_TAGS = frozenset(CHROME)
HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
CELL_GAP = re.compile(r"\t+")
CELL_SEPARATOR = " | "  # between a table row's cells in a text node (filters/nodes.py reads rows so)

# A line break followed by blank lines (spaces and tabs only), each ending in a line break: found from the line
# break, a literal the regex engine skips to, without backtracking (possessive blanks); single_blank_lines takes
# the blanks before it.
BLANK_RUN = re.compile(r"\n(?:[ \t]*+\n)+")
SPACES = re.compile(r"\s+")


@dataclass
class Node:
    """One node of an interleaved document: a text block (`text`), or an image (`image`, with the
    caption of the `<figure>` it sits in, if any)."""

    type: str                      # "text" | "image"
    text: str = ""
    image: ImageRef | None = None
    caption: str = ""


@dataclass
class Linearised:
    nodes: list[Node] = field(default_factory=list)
    chrome_images: list[ImageRef] = field(default_factory=list)  # <img>s outside the content

    @property
    def text(self) -> str:
        """The document's text, blocks separated by a blank line (what the text rules judge)."""
        return "\n\n".join(n.text for n in self.nodes if n.type == "text")

    @property
    def images(self) -> list[Node]:
        return [n for n in self.nodes if n.type == "image"]


def _hidden(el) -> bool:
    return (el.hasattr("hidden") or (el.getattr("aria-hidden") or "").strip().lower() == "true"
            or HIDDEN_STYLE.search(el.getattr("style") or "") is not None)


def _clean(text: str) -> str:
    """Table cells (tab-separated by the extractor) as ` | `, list bullets as `- `, single blank lines."""
    if "\t" in text:
        text = CELL_GAP.sub(CELL_SEPARATOR, text)
    return single_blank_lines(_bullets_as_dashes(text)).strip()


def single_blank_lines(text: str) -> str:
    r"""What re.sub(r"[ \t]*\n(?:[ \t]*\n)+", "\n", text) gives, in linear time: each line break that blank
    lines (spaces and tabs only) follow, with them and the blanks before it, as one line break. The regex,
    tried at every blank, ran to the end of a run of blank lines each time: quadratic in the run."""
    out, last = [], 0
    for run in BLANK_RUN.finditer(text):
        out += [text[last:run.start()].rstrip(" \t"), "\n"]  # blanks before the run (the last one ended in "\n")
        last = run.end()
    return "".join(out) + text[last:] if out else text


def _bullets_as_dashes(text: str) -> str:
    r"""What re.sub(r"^\s*•\s*", "- ", text, flags=re.M) gives, in linear time: a bullet that only whitespace
    separates from the start of a line (the first line start of that whitespace, after the previous
    replacement) goes with that whitespace and the whitespace after it. The regex tried every line start
    of a run of blank lines and ran to the run's end each time: quadratic (80,000 newlines, 12 s)."""
    out, last, b = [], 0, text.find("•")
    while b >= 0:
        start = b
        while start > last and text[start - 1].isspace():  # each blank is walked over once: runs end at b
            start -= 1
        if not (start == 0 or text[start - 1] == "\n"):  # the first line start in text[start:b]
            newline = text.find("\n", start, b)
            start = -1 if newline < 0 else newline + 1
        if start < 0:
            b = text.find("•", b + 1)
            continue
        end = b + 1
        while end < len(text) and text[end].isspace():
            end += 1
        out += [text[last:start], "- "]
        last = end
        b = text.find("•", end)
    out.append(text[last:])
    return "".join(out)


def linearise(html: str, page_url: str) -> Linearised:
    """The page's content as text and image nodes in DOM order, and the images outside it. Chrome and
    hidden subtrees are removed, each `<img>`'s alt is replaced by a marker, and the text extracted in
    one native call (resiliparse, block structure and alt texts kept: with alt texts off it drops every
    `<figure>` whole); the markers cut it into nodes. A marker that does not come out (its image was in
    removed chrome) makes that image a chrome image.

    Linear in the page's nodes: elements are fetched by tag or one selector list as lists (`values()`:
    indexing one of resiliparse's collections walks it from the start, so iterating one is quadratic), the figure an
    image sits in is found by walking up with a memo (each element climbed once), and the tree is edited
    by attribute and subtree removal only (inserting a node costs resiliparse a walk up to the root).
    Resiliparse's extraction is not linear in the nesting depth: callers bound it with a deadline
    (`linearise_bounded`)."""
    tree = HTMLTree.parse(without_marker_lookalikes(html))
    imgs = tree.document.get_elements_by_tag_name("img").values()
    return _linearise_tree(tree, imgs, image_refs(tree, imgs, page_url))


def image_views(html: str, page_url: str, context_chars: int,
                seconds: list | None = None) -> tuple[list[ImageRef], Linearised]:
    """What extract_images(html, page_url, context_chars) and linearise(html, page_url) give, from one
    parse: the pairs' references take their context from the tree with markers added and taken out
    again, then the tree is linearised (which edits it for good). For a page that may hold images.
    `seconds`, if given, gets what each of the two took, the shared parse counted in both."""
    started = time.perf_counter()
    return _tree_image_views(HTMLTree.parse(without_marker_lookalikes(html)), page_url, context_chars, started,
                             seconds)


def _tree_image_views(tree: HTMLTree, page_url: str, context_chars: int, started: float,
                      seconds: list | None) -> tuple[list[ImageRef], Linearised]:
    """image_views of a page parsed since `started`, its HTML without marker lookalikes."""
    imgs = tree.document.get_elements_by_tag_name("img").values()
    refs = image_refs(tree, imgs, page_url)
    parsed = time.perf_counter()
    with_context = [replace(ref) for ref in refs]  # linearise's own refs carry no context
    add_contexts(tree, imgs, with_context, context_chars, restore=True)
    contexts = time.perf_counter()
    doc = _linearise_tree(tree, imgs, refs)
    if seconds is not None:
        seconds += [contexts - started, parsed - started + time.perf_counter() - contexts]
    return with_context, doc


def image_view_rows(html: str, page_url: str, context_chars: int) -> tuple:
    """image_views as plain rows (the page step "image_views" of extract/sandbox.py): the references'
    rows, linearise_rows' two lists, and the seconds each view took."""
    seconds: list = []
    refs, doc = image_views(html, page_url, context_chars, seconds)
    return ([ref.row() for ref in refs], *_rows(doc), *seconds)


def text_and_image_view_rows(html: str, page_url: str, context_chars: int) -> tuple:
    """The text branch's main content (extract/sandbox.py resiliparse_text) and image_view_rows, from one
    parse where the two would parse the same string (no tweet class to rename, no marker lookalike to
    replace): (text, *image_view_rows' rows, the seconds the text and each view took, the shared parse
    counted in all three). The page step "text_and_image_views" of extract/sandbox.py."""
    from extract.sandbox import _TWEET_CLASS, resiliparse_text, resiliparse_tree_text

    started = time.perf_counter()
    if _TWEET_CLASS in html or MARKER_START in html:
        text = resiliparse_text(html)[0]
        text_s = time.perf_counter() - started
        return (text, *image_view_rows(html, page_url, context_chars), text_s)
    tree = HTMLTree.parse(html)
    parse_s = time.perf_counter() - started
    text = resiliparse_tree_text(tree)[0]  # reads the tree; the views edit it after
    text_s = time.perf_counter() - started
    seconds: list = []
    refs, doc = _tree_image_views(tree, page_url, context_chars, time.perf_counter() - parse_s, seconds)
    return (text, [ref.row() for ref in refs], *_rows(doc), *seconds, text_s)


def text_and_image_views_bounded(html: str, page_url: str, context_chars: int, text_timeout_ms: float,
                                 refs_timeout_ms: float, linearise_timeout_ms: float
                                 ) -> tuple[str, list[ImageRef], Linearised]:
    """text_and_image_view_rows under the deadlines of the three steps it stands for (the text branch's
    extraction, extract_images_bounded, linearise_bounded), as image_views_bounded: a part that took
    longer than its own deadline, or running past all three, is SandboxError("page_timeout"); a caller
    that gets SandboxError runs the steps alone for their own verdicts."""
    from extract import sandbox

    text, refs, nodes, chrome, refs_s, linearise_s, text_s = sandbox.run_page_step(
        "text_and_image_views", html, (page_url, context_chars), text_timeout_ms + refs_timeout_ms
        + linearise_timeout_ms)
    if (text_s * 1000 > text_timeout_ms or refs_s * 1000 > refs_timeout_ms
            or linearise_s * 1000 > linearise_timeout_ms):
        raise sandbox.SandboxError("page_timeout", f"text_and_image_views: {text_s * 1000:.0f} / "
                                   f"{refs_s * 1000:.0f} / {linearise_s * 1000:.0f} ms")
    return text, [ImageRef(*ref) for ref in refs], _document(nodes, chrome)


def _linearise_tree(tree: HTMLTree, imgs: list, refs: list[ImageRef]) -> Linearised:
    """linearise on a parsed page: `imgs` its <img> elements in document order, `refs` their ImageRefs."""
    document = tree.document
    captions = _captions(imgs, document.get_elements_by_tag_name("figure").values(),
                         document.get_elements_by_tag_name("figcaption").values())
    for el in document.query_selector_all(REMOVED).values():  # document order: ancestors first
        if el.parent is not None and (el.tag in CHROME_TAGS or _hidden(el)):  # parent None: already removed
            el.decompose()
    for position, img in enumerate(imgs):
        img.setattr("alt", f"\n\ue000{position}\ue001\n")
    text = extract_plain_text(tree, preserve_formatting=True, main_content=False, list_bullets=True,
                              alt_texts=True, links=False, form_fields=False, noscript=False, comments=False)
    out, seen = Linearised(), set()
    pieces = MARKER.split(text)  # text, position, text, position, ..., text
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            block = _clean(piece)
            if block:
                out.nodes.append(Node("text", block))
            continue
        position = int(piece)
        if position not in seen:  # markers are only ours (without_marker_lookalikes), each once
            seen.add(position)
            out.nodes.append(Node("image", image=refs[position], caption=captions.get(position, "")))
    out.chrome_images = [r for r in refs if r.position not in seen]
    return out


def linearise_rows(html: str, page_url: str) -> tuple[list[tuple], list[tuple]]:
    """linearise as plain rows (the page step "linearise" of extract/sandbox.py): (type, text, image
    row or None, caption) per node, and the chrome images' rows."""
    return _rows(linearise(html, page_url))


def _rows(doc: Linearised) -> tuple[list[tuple], list[tuple]]:
    return ([(n.type, n.text, n.image.row() if n.image is not None else None, n.caption) for n in doc.nodes],
            [ref.row() for ref in doc.chrome_images])


def _document(nodes: list[tuple], chrome: list[tuple]) -> Linearised:
    """_rows reversed: the document back from its rows."""
    return Linearised([Node(kind, text, ImageRef(*ref) if ref is not None else None, caption)
                       for kind, text, ref, caption in nodes], [ImageRef(*ref) for ref in chrome])


def linearise_bounded(html: str, page_url: str, timeout_ms: float) -> Linearised:
    """linearise within `timeout_ms`, native code included (extract/sandbox.py run_page_step: a page that
    may run long goes to a child process killed at the deadline): the document, or SandboxError
    ("page_timeout" or "page_error", the detail naming the step)."""
    from extract import sandbox

    return _document(*sandbox.run_page_step("linearise", html, (page_url,), timeout_ms))


def image_views_bounded(html: str, page_url: str, context_chars: int, refs_timeout_ms: float,
                        linearise_timeout_ms: float) -> tuple[list[ImageRef], Linearised]:
    """image_views under the deadlines of the two steps it stands for (extract_images_bounded,
    linearise_bounded): the child is given both together, and a view that took longer than its own
    deadline is SandboxError("page_timeout"), as is running past both; "page_error" as they do. A caller
    that gets SandboxError runs the two steps alone for their own verdicts."""
    from extract import sandbox

    refs, nodes, chrome, refs_s, linearise_s = sandbox.run_page_step(
        "image_views", html, (page_url, context_chars), refs_timeout_ms + linearise_timeout_ms)
    if refs_s * 1000 > refs_timeout_ms or linearise_s * 1000 > linearise_timeout_ms:
        raise sandbox.SandboxError("page_timeout", f"image_views: {refs_s * 1000:.0f} / {linearise_s * 1000:.0f} ms")
    return [ImageRef(*ref) for ref in refs], _document(nodes, chrome)


def _captions(imgs: list, figures: list, figcaptions: list) -> dict[int, str]:
    """{img position: the caption of the innermost <figure> it sits in}. A figure's caption is the
    text of its first <figcaption> (in document order) that belongs to it (no other figure in between)
    and holds no figure itself: a caption is text about the figure, and so the captions whose text is
    read never nest, which keeps reading them linear in the page (a figcaption holding figure after
    figure, nested, would be read once per figure)."""
    if not figures:
        return {}
    figure_of: dict = {}  # element -> the nearest <figure> above it (None: none), filled as walked
    image_figures = {}
    for position, img in enumerate(imgs):
        figure = _nearest_figure(img, figure_of)
        if figure is not None:
            image_figures[position] = figure
    above_figure: set = set()  # elements with a figure below them
    for figure in figures:
        node = figure.parent
        while node is not None and node.type == ELEMENT and node not in above_figure:
            above_figure.add(node)
            node = node.parent
    wanted, caption_of = set(image_figures.values()), {}
    for figcaption in figcaptions:
        if figcaption in above_figure:
            continue
        figure = _nearest_figure(figcaption, figure_of)
        if figure in wanted and figure not in caption_of:
            caption_of[figure] = SPACES.sub(" ", figcaption.text).strip()
    return {position: caption_of.get(figure, "") for position, figure in image_figures.items()}


def _nearest_figure(node, figure_of: dict):
    """The nearest <figure> above `node`, or None; every element climbed past is memoised in
    `figure_of` with the same answer, so all calls together climb each element once."""
    path = []
    while node not in figure_of:
        path.append(node)
        parent = node.parent
        if parent is None or parent.type != ELEMENT:
            found = None
            break
        if parent.tag == "figure":
            found = parent
            break
        node = parent
    else:
        found = figure_of[node]
    for climbed in path:
        figure_of[climbed] = found
    return found


def recycle_candidates(doc: dict, recycled_from: str) -> list[dict]:
    """The image nodes of a dropped interleaved document (node dicts, as the pipeline carries them)
    as image-text pair candidates: each with its alt, its `<figure>` caption and the text blocks right
    before and after it in reading order. The pairs branch picks the text (the first of those that
    passes its alt rules, the adjacent blocks only when short enough to be a caption) and applies its
    own rules and dedup. `recycled_from` is "<stage>/<reason>" of the drop."""
    nodes = doc["nodes"]
    out = []
    for i, node in enumerate(nodes):
        if node["type"] != "image":
            continue
        before = nodes[i - 1]["text"] if i > 0 and nodes[i - 1]["type"] == "text" else ""
        after = nodes[i + 1]["text"] if i + 1 < len(nodes) and nodes[i + 1]["type"] == "text" else ""
        out.append({"page_id": doc["id"], "page_url": doc["url"], "warc_file": doc.get("warc_file") or "",
                    "warc_date": doc.get("warc_date") or "", "img_url": node["image_url"],
                    "position": node["position"], "alt": node.get("alt"), "caption": node.get("caption") or "",
                    "text_before": before, "text_after": after, "recycled_from": recycled_from})
    return out
