"""A web page as an interleaved document: text blocks and images in DOM order (no Beam here).

OBELICS (Laurençon et al. 2023, sec. 3.2 and its `simplification`/`linearization` code) simplifies the
DOM, then walks it, cutting the text where an image sits. We do the same walk with three differences
the interleaved branch needs:
- `<figure>`/`<figcaption>`, list items and table cells are kept as text (OBELICS's released code drops
  figure captions; resiliparse's plain-text extractor drops `<figure>` entirely), and an image inside a
  `<figure>` carries that figure's caption, the candidate caption when its document is recycled into
  pairs;
- page chrome is cut by element, not by text statistics: `nav`, `header`, `footer`, forms,
  scripts, hidden elements (`hidden`, `aria-hidden="true"`, inline `display:none`); the images inside
  them come back as `chrome_images`, so every `<img>` of the page is accounted for;
- the text itself comes from resiliparse's plain-text extractor in one native call, with a marker where
  each image was, so the Python work per page is per image and figure, not per DOM node.

Images are the pairs branch's `ImageRef`s (extract/images.py: `<picture>`/`srcset`/lazy-loading URL
choice, `<base href>`, canonical URLs), so the same URL rules (`check_image_ref`) apply to both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from extract.images import MARKER, ImageRef, image_refs

# Subtrees that are page chrome, code or controls, not content.
# (script, style, noscript and template the extractor skips by itself.)
CHROME = ("nav", "header", "footer", "form", "button", "select", "textarea", "iframe", "object", "embed", "canvas",
          "svg", "audio", "video", "map", "dialog")
HIDDEN = '[hidden], [aria-hidden="true" i], [style*="none" i], [style*="hidden" i]'  # then checked exactly
HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
CELL_GAP = re.compile(r"\t+")
# A run of blank lines is matched from the start of its run of blanks only: the same matches, linear (tried
# at every blank, the pattern ran to the run's end each time, quadratic: 80,000 newlines took 12 s).
BLANKS = re.compile(r"(?<![ \t])[ \t]*\n(?:[ \t]*\n)+")
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
    return BLANKS.sub("\n", _bullets_as_dashes(CELL_GAP.sub(" | ", text))).strip()


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
    """The page's content as text and image nodes in DOM order, and the images outside it. The DOM is
    simplified in place (chrome and hidden subtrees removed, `<figure>` and `<figcaption>` made
    `<div>`s: resiliparse's extractor drops both), each `<img>` replaced by a marker, and the text extracted in one native
    call (resiliparse, block structure kept); the markers cut it into nodes. A marker that does not come
    out (its image was in removed chrome) makes that image a chrome image."""
    tree = HTMLTree.parse(html)
    document = tree.document  # elements by tag name (a plain walk) where a tag is all a selector says:
    # this function took 0.90 ms a page on mixed-dev with CSS queries, 0.84 ms so
    imgs = list(document.get_elements_by_tag_name("img"))
    refs = image_refs(tree, imgs, page_url)
    captions = {}
    for position, img in enumerate(imgs):
        img.setattr("data-curate-position", str(position))
    figures = list(document.get_elements_by_tag_name("figure"))
    for figure in figures:
        caption = next(iter(figure.get_elements_by_tag_name("figcaption")), None)
        text = SPACES.sub(" ", caption.text).strip() if caption is not None else ""
        for img in figure.get_elements_by_tag_name("img"):
            captions.setdefault(int(img.getattr("data-curate-position")), text)  # the innermost figure's
    # each element's children move into a div of its own, so the order they are replaced in is immaterial
    for el in figures + list(document.get_elements_by_tag_name("figcaption")):
        div = tree.create_element("div")
        for child in list(el.child_nodes):
            div.append_child(child)
        el.parent.replace_child(div, el)
    chrome = [el for tag in CHROME for el in document.get_elements_by_tag_name(tag)]
    for el in chrome + [el for el in document.query_selector_all(HIDDEN) if _hidden(el)]:
        if el.parent is not None:  # not inside a subtree already removed
            el.decompose()
    for position, img in enumerate(imgs):
        if img.parent is not None:
            img.parent.replace_child(tree.create_text_node(f"\n\ue000{position}\ue001\n"), img)
    text = extract_plain_text(tree, preserve_formatting=True, main_content=False, list_bullets=True,
                              alt_texts=False, links=False, form_fields=False, noscript=False, comments=False)
    out, seen = Linearised(), set()
    pieces = MARKER.split(text)  # text, position, text, position, ..., text
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            block = _clean(piece)
            if block:
                out.nodes.append(Node("text", block))
            continue
        position = int(piece)
        if position < len(refs) and position not in seen:  # a marker look-alike in the page is text
            seen.add(position)
            out.nodes.append(Node("image", image=refs[position], caption=captions.get(position, "")))
    out.chrome_images = [r for r in refs if r.position not in seen]
    return out


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
