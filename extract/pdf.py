"""PDF -> interleaved text and image nodes in reading order, with PDFium (pypdfium2). No Beam here.

`parse_pdf(data)` opens one PDF held in memory and returns plain, picklable data (the sandbox runs it
in a child process and pickles the result back):

    {"reason": None | "pdf_encrypted" | "pdf_broken" | "pdf_no_text_layer" | "pdf_too_many_pages",
     "detail": str, "pages": int, "nodes": [node, ...]}

    text node:  {"type": "text", "page": p, "text": str, "bbox": [x0, y0, x1, y1]}
    image node: {"type": "image", "page": p, "index": k, "bbox": [x0, y0, x1, y1], "width": px,
                 "height": px, "format": "JPEG" | "PNG", "data": bytes, "caption": str | None}

`page` counts from 1 (as PDF viewers and the dev labels do). `bbox` is in PDF points in the page's own
user space (origin bottom-left, y up, as PDFium reports it), rounded to 0.01 pt. `index` is the
image's 0-based position among the page's *kept* images in painting (content-stream) order, an id
that does not depend on the layout heuristics. Nodes come page by page, each page in reading order.
A bad PDF never raises: it gets a reason. `pdf_encrypted`: PDFium needs a password we do not have
(FPDF_ERR_PASSWORD) or cannot handle the security handler (FPDF_ERR_SECURITY); PDFs with an owner
password only open without one and are parsed. `pdf_broken`: PDFium cannot open it (not a PDF, broken
xref, truncated: PDFium's xref reconstruction does not recover a file cut short, so a truncated PDF
is refused rather than parsed in part) or a page fails to load; `detail` carries PDFium's error text.
`pdf_too_many_pages`: more than `max_pages` pages ("N pages > max_pages"), nothing parsed.
`pdf_no_text_layer`: no page has any visible character; the page count and image nodes are still
returned, so callers can count what OCR would recover, but with "format" and "data" None: images are
encoded only once a page has text (the pages before it are parsed again), so a scan is never decoded.
With reason None, `detail` is "" or says what was skipped (undecodable or oversized images).

Text. Per page, PDFium's text page gives every character with its loose box (the font's ascent to
descent, so all characters of a line share one height) in content-stream order, with the spaces and
line breaks PDFium infers (FPDFText_* in PDFium's public/fpdf_text.h). Characters whose box centre lies
outside the visible page (media box intersected with crop box) are dropped: viewers do not show them
(ImageMagick writes its layer name "Background" off a 4-pt page). Consecutive characters form a line
until PDFium's line break (ignored where the next character carries on right after the last one on
the same line: PDFium breaks after superscripts, "km2" / ")"), a jump off the line (vertical overlap
under half a line height), a jump back, or a horizontal gap over `LINE_SPLIT_GAP` line heights; such
a gap split is kept only at a gutter, where no line just above or below crosses the gap (`_rejoin`:
a stretched justified line is mended, a row of a stream that interleaves columns or table cells is
not). Rotated text (arXiv's margin stamp, landscape tables) is handled in its own upright
frame, by the character angle rounded to a quarter turn. Lines become blocks (paragraphs) top-down: a
line joins the block whose last line is just above it (gap at most `BLOCK_MAX_GAP` line heights,
heights within `BLOCK_HEIGHT_RATIO`, the two lines overlapping horizontally by at least half of the
shorter one), unless it is an indented first line after a line that ends short (a new paragraph in
the LaTeX/Word style without paragraph spacing). A block's lines are joined with spaces, whitespace is
collapsed, Latin ligatures (U+FB00-FB06) are expanded, and line ends are de-hyphenated: a hyphen
between a letter and a lowercase continuation is dropped ("exam-" + "ple" -> "example"), any other
hyphen is kept without a space ("MED-" + "LINE" -> "MED-LINE"), a soft hyphen (U+00AD) is always
dropped. PDFium marks a hyphen it found at a line end as U+0002 and joins the lines; it is read as '-'.

Reading order. A recursive XY-cut (Nagy & Seth, "Hierarchical representation of optically scanned
documents", ICPR 1984; Ha, Haralick & Phillips, "Recursive X-Y cut using bounding boxes of connected
components", ICDAR 1995, doi:10.1109/ICDAR.1995.602059) on the boxes of the page's text blocks and
images, in display orientation (the page's /Rotate applied). A region is first cut at its horizontal
whitespace gaps (rows across the whole region, top to bottom: full-width titles, headers and figures
stay where they are), then, where no such gap is left, at its vertical gaps (columns, left to right),
recursively; a region with neither keeps its boxes top to bottom. Cutting at all gaps of one direction
at once gives the same order as cutting at the widest gap first and recursing, since the remaining
gaps still cross the halves. One step is added: the classic XY-cut cuts a two-column section in the
wrong place wherever paragraph breaks of both columns happen to line up (it then reads the top halves
of both columns before the bottom halves). So consecutive horizontal strips are glued back together
while their union still has a vertical gap running its full height (a shared column gutter), one of
the two has boxes in every column of the union (the other may stop short: a column running on below
the other's end), and each strip's boxes in a column fill at least half of its width or align with
one of its edges (a page number under the gutter or centred under one column is no column text, a
ragged index entry is); a full-width element breaks the run.
Images larger than half the page that have text on them (scans with an OCR layer, background art)
are put first on their page and left out of the cut, which would otherwise find no gap at all.

Images. Every image object on the page, including those nested in Form XObjects
(`PdfPage.get_objects(filter=(FPDF_PAGEOBJ_IMAGE,), max_depth=FORM_MAX_DEPTH)`). In pypdfium2 5.13
(PDFium 153.0.7999) a nested object's bounds are in its container's space: the form's /Matrix is folded into
its children, the `cm` in force at the form's `Do` is the form object's own matrix, so the corners
(`get_quad_points`) are mapped through the matrices of all containing form objects (checked against a
rendering of a two-level nested, rotated form in tests/test_pdf.py). Two size rules, both must pass:
the intrinsic pixel size (`get_px_size`) has both sides >= `min_image_side` (150 px by default, the
minimum OBELICS uses for web images: Laurençon et al., arXiv:2306.16527), and the visible part of the
image's box covers >= `MIN_IMAGE_AREA` (1%) of the page (bullets, rules and logo tiles painted small
from a big bitmap). "data": the raw stream when the only non-trivial filter is DCTDecode (the JPEG file
itself, no re-encoding; simple filters such as FlateDecode wrapped around it are decoded first), else
the image bitmap as PDFium decodes it (`get_bitmap(render=False)`: colour spaces such as CMYK, Indexed
and ICC come out as RGB or grey; JPX and CCITT are decoded) encoded as PNG (deterministic: same PDF,
same bytes). An image's (soft) mask is not applied (FPDFImageObj_GetBitmap ignores it, as
pypdfium2's own `PdfImage.extract` does), nor is a /Decode array to a raw JPEG stream. Bitmaps over
`MAX_BITMAP_PIXELS` are skipped rather than decoded.

Captions. The text block next to an image in reading order, below it (first) or above it,
overlapping it horizontally, whose text starts with a figure/table label and a number (`CAPTION`:
"Figure 1", "Fig. 2", "Table 3", "TABLE IV", "Abbildung 4", "Abb. 5", "Tabelle 6", "Figura 7",
"Tableau 8", "Рис. 9", "Рисунок 10", "图 11", "表 12", "図 13"). Other images and short text blocks
(at most `CAPTION_SKIP_CHARS`: subfigure labels, legends) in between are skipped, up to
`CAPTION_REACH` nodes, so side-by-side subfigures share their caption. The block also stays a text
node.

Why pypdfium2: PDFium (Chrome's PDF engine, BSD-3) through pypdfium2 (Apache-2.0 OR BSD-3-Clause)
gives character boxes, every image object with its transform, also inside forms, and the decoded
bitmaps, in one self-contained wheel (https://pypdfium2.readthedocs.io/). pypdf's `page.images`
gives the image streams (forms included) but not where they are drawn, and no glyph boxes, which the
XY-cut needs; PyMuPDF is AGPL-3.0.
"""

from __future__ import annotations

import bisect
import ctypes
import io
import math
import operator
import re
import unicodedata
from dataclasses import dataclass, field
from itertools import accumulate, compress, repeat

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

# Horizontal gap, in line heights, after which a line is split in two (then `_rejoin` keeps the split
# only at a gutter): wider than the gap after a heading or list number (GeoTopo's table of contents:
# 1.03) and most word spaces; a stretched justified line reaches 2.3 (N18-3011 p. 2) and is rejoined.
# Column gutters are 0.8-1.5 line heights (LaTeX's 10 pt at 10 pt type, ACL's 0.6 cm at 11 pt), so a
# stream that interleaves narrow columns line by line stays unsplit: its rows are read across.
LINE_SPLIT_GAP = 2.0
# After a line break from PDFium, a character at most this many line heights right of the last
# one continues the line; a space goes in if the gap is wider than SPACE_GAP line heights.
NEWLINE_CONTINUE_GAP = 0.5
SPACE_GAP = 0.15
# A gap split stands only if no line within this many line heights above or below crosses the gap.
GUTTER_WINDOW = 3.0
# A line joins the block above when the whitespace between them is at most this many line heights
# (loose boxes of consecutive lines of a paragraph nearly touch; section headings and captions sit
# further away).
BLOCK_MAX_GAP = 0.6
# Lines whose heights differ by more than this factor (a heading over body text) stay apart.
BLOCK_HEIGHT_RATIO = 1.3
# A first line indented by more than this many line heights after a line ending this many line
# heights short of the block's right edge starts a new paragraph.
PARAGRAPH_INDENT = 0.7
PARAGRAPH_SHORT_END = 1.5
# Whitespace narrower than this (PDF points) is no cut in the XY-cut.
XY_MIN_GAP = 2.0
# Strips glued into one column section must fill at least this share of each column's width, or
# align with one of its edges within GLUE_ALIGN of its width.
GLUE_MIN_WIDTH = 0.5
GLUE_ALIGN = 0.02
# Images covering less of the page than this are decoration; ones covering more than
# BACKGROUND_AREA with text on them are backgrounds/scans (ordered first, outside the cut).
MIN_IMAGE_AREA = 0.01
BACKGROUND_AREA = 0.5
# Bitmaps with more pixels are not decoded (PIL's default MAX_IMAGE_PIXELS, a decompression-bomb
# limit; fixed here so that results do not depend on a global someone else may change).
MAX_BITMAP_PIXELS = 89_478_485
# pypdfium2's default recursion limit into nested Form XObjects.
FORM_MAX_DEPTH = 15
# The caption search walks at most CAPTION_REACH nodes from the image, over other images and text
# blocks of at most CAPTION_SKIP_CHARS characters (subfigure labels "(a) SPECTER (b) SciBERT", legends).
CAPTION_REACH = 8
CAPTION_SKIP_CHARS = 80
# Figure/table caption labels: English, German, Spanish/Italian/Portuguese, French, Russian, Chinese,
# Japanese, followed by a number (arabic, roman for IEEE tables, or an appendix letter + number).
CAPTION = re.compile(
    r"^(?:fig(?:ure|\.)?|table|abbildung|abb\.|tabelle|figura|tableau|рис\.|рисунок|图|表|図)"
    r"\s*(?:[A-Z]?\d+|[IVXLC]+\b)", re.IGNORECASE)

_HARD_HYPHENS = "-\u2010"
_SOFT_HYPHEN = "\u00ad"
# A text object turned by less than this (tangent of its angle) against the page has only characters
# whose angle rounds to no quarter turn: 26.6 degrees, well inside the 45 where rounding flips, so
# that float rounding in PDFium's matrix products cannot matter.
UPRIGHT_TAN = 0.5
# Kinds of text-page characters (`_kind`); 0 is one that carries nothing.
_NEWLINE, _SPACE, _GLYPH = 1, 2, 3
# A line break's weight in `_lines`'s running count, above any number of spaces on a page.
_NEWLINE_WEIGHT = 1 << 32


class _Handle(ctypes.c_void_p):
    """A PDFium handle as a ctypes object: a c_void_p subclass is not converted to int when returned,
    so that it can be passed on as a pointer to the `_bind` functions."""


def _bind(name: str, restype, *argtypes):
    """PDFium's function `name` with only the argument types given (by default none): ctypes then
    passes handles and byref()s as pointers and ints as C ints without a conversion per argument, about
    half the cost of a call through pypdfium2's bindings, which check every argument's type. That is
    most of the cost at one call per character or page object."""
    return ctypes.CFUNCTYPE(restype, *argtypes)(ctypes.cast(getattr(pdfium_c, name), ctypes.c_void_p).value)


_GET_UNICODE = _bind("FPDFText_GetUnicode", ctypes.c_uint)
_GET_LOOSE_CHAR_BOX = _bind("FPDFText_GetLooseCharBox", ctypes.c_int)
_GET_CHAR_ANGLE = _bind("FPDFText_GetCharAngle", ctypes.c_float)
_PAGE_COUNT_OBJECTS = _bind("FPDFPage_CountObjects", ctypes.c_int)
_PAGE_GET_OBJECT = _bind("FPDFPage_GetObject", _Handle)
_FORM_COUNT_OBJECTS = _bind("FPDFFormObj_CountObjects", ctypes.c_int)
# The index is an unsigned long, wider than the C int an untyped int becomes.
_FORM_GET_OBJECT = _bind("FPDFFormObj_GetObject", _Handle, ctypes.c_void_p, ctypes.c_ulong)
_GET_TYPE = _bind("FPDFPageObj_GetType", ctypes.c_int)
_GET_MATRIX = _bind("FPDFPageObj_GetMatrix", ctypes.c_int)


def _handle(raw) -> _Handle:
    return _Handle(ctypes.cast(raw, ctypes.c_void_p).value)


def parse_pdf(data: bytes, max_pages: int = 500, min_image_side: int = 150) -> dict:
    """-> {"reason": None | "pdf_encrypted" | "pdf_broken" | "pdf_no_text_layer" | "pdf_too_many_pages",
           "detail": str, "pages": int, "nodes": [node, ...]}"""
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        encrypted = e.err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY)
        return _result("pdf_encrypted" if encrypted else "pdf_broken", str(e), 0, [])
    try:
        n_pages = len(pdf)
        if n_pages > max_pages:
            return _result("pdf_too_many_pages", f"{n_pages} pages > {max_pages}", n_pages, [])
        if n_pages == 0:
            return _result("pdf_broken", "no pages", 0, [])
        # Images are encoded once the document has text: until then, a page without text gets its image
        # nodes without data (its skips counted apart), and the pages before the first page with text
        # are parsed again, encoding them. A scan (no text layer, dropped) is never decoded.
        nodes, skipped, leading_skipped, has_text = [], _Skipped(), _Skipped(), False
        for index in range(n_pages):
            try:
                if has_text:
                    nodes += _parse_page_at(pdf, index, min_image_side, skipped, False)[0]
                    continue
                page_skipped = _Skipped()
                page_nodes, has_text = _parse_page_at(pdf, index, min_image_side, page_skipped, True)
                if has_text:  # the earlier pages' images now count: parsed again, encoding them
                    nodes = [node for k in range(index)
                             for node in _parse_page_at(pdf, k, min_image_side, skipped, False)[0]]
                (skipped if has_text else leading_skipped).add(page_skipped)
            except pdfium.PdfiumError as e:  # a page PDFium cannot load or read
                return _result("pdf_broken", f"page {index + 1}: {e}", n_pages, [])
            nodes += page_nodes
        if not has_text:
            return _result("pdf_no_text_layer", leading_skipped.describe(), n_pages, nodes)
        return _result(None, skipped.describe(), n_pages, nodes)
    finally:
        pdf.close()


def _parse_page_at(pdf, index: int, min_image_side: int, skipped: _Skipped, textless: bool) -> tuple[list, bool]:
    """`_parse_page` of page `index`; `textless`: no page before it has text, so its images are only
    encoded if it has."""
    page = pdf[index]
    try:
        return _parse_page(page, index + 1, min_image_side, skipped, textless)
    finally:
        page.close()


def xy_cut(boxes: list, min_gap: float = XY_MIN_GAP) -> list[int]:
    """Reading order of `boxes` ([x0, y0, x1, y1], y up) as indices: recursive XY-cut, horizontal
    gaps first, strips sharing a column gutter glued back (see the module docstring)."""
    order: list[int] = []
    _cut(list(range(len(boxes))), boxes, min_gap, order)
    return order


def _result(reason, detail, pages, nodes) -> dict:
    return {"reason": reason, "detail": detail, "pages": pages, "nodes": nodes}


@dataclass
class _Skipped:
    """Images left out for reasons other than the size rules, reported in `detail`."""
    undecodable: int = 0
    oversized: int = 0

    def add(self, other: "_Skipped") -> None:
        self.undecodable += other.undecodable
        self.oversized += other.oversized

    def describe(self) -> str:
        parts = []
        if self.undecodable:
            parts.append(f"{self.undecodable} undecodable image(s) skipped")
        if self.oversized:
            parts.append(f"{self.oversized} image(s) over {MAX_BITMAP_PIXELS} px skipped")
        return "; ".join(parts)


@dataclass
class _Line:
    """A line (or block, when `lines` is filled) of text. `q`: the text's orientation in quarter turns
    counterclockwise; f*: its box in the frame where that text is upright; box: in page space."""
    q: int
    fx0: float
    fy0: float
    fx1: float
    fy1: float
    box: list
    text: str = ""
    last_x0: float = 0.0
    last_x1: float = 0.0
    gap_split: bool = False
    lines: list = field(default_factory=list)

    @property
    def height(self) -> float:
        return self.fy1 - self.fy0

    def extend(self, f, box) -> None:
        self.fx0, self.fy0 = min(self.fx0, f[0]), min(self.fy0, f[1])
        self.fx1, self.fy1 = max(self.fx1, f[2]), max(self.fy1, f[3])
        b = self.box
        b[0], b[1], b[2], b[3] = min(b[0], box[0]), min(b[1], box[1]), max(b[2], box[2]), max(b[3], box[3])


def _parse_page(page, page_no: int, min_image_side: int, skipped: _Skipped, textless: bool = False) -> tuple[list, bool]:
    """The page's nodes in reading order, and whether it has any text. `textless` (no earlier page
    has text): a page without text gets its image nodes without "format" and "data" (None)."""
    visible = page.get_bbox()
    textpage = page.get_textpage()
    try:
        objects, upright = _page_objects(page)
        blocks = _blocks(_lines(textpage, visible, upright))
    finally:
        textpage.close()
    texts = [{"type": "text", "page": page_no, "text": _block_text(b), "bbox": _round(b.box)}
             for b in blocks]
    texts = [t for t in texts if t["text"]]
    images = _images(objects, page_no, visible, min_image_side, skipped, encode=bool(texts) or not textless)
    rotation = page.get_rotation()
    items = texts + images
    display = [_to_display(it["bbox"], rotation, visible) for it in items]
    page_area = _area(visible)
    centres = [((d[0] + d[2]) / 2, (d[1] + d[3]) / 2) for d in display[:len(texts)]]
    background = [i for i in range(len(texts), len(items))
                  if _area(display[i]) > BACKGROUND_AREA * page_area
                  and any(_contains(display[i], c) for c in centres)]
    rest = [i for i in range(len(items)) if i not in background]
    order = background + [rest[j] for j in xy_cut([display[i] for i in rest])]
    _attach_captions(order, items, display, set(background))
    return [items[i] for i in order], bool(texts)


def _page_objects(page) -> tuple[list, bool]:
    """The page's image objects in painting order, those in Form XObjects included, as
    `page.get_objects(filter=(FPDF_PAGEOBJ_IMAGE,), max_depth=FORM_MAX_DEPTH)` yields them (same
    `container` and `level`), and whether all text on the page is upright (`_upright`). Walked with raw
    calls inside map(): get_objects wraps every one of a page's thousands of text and path objects in
    a Python helper, which costs about as much as PDFium's loading of the page; here only images and
    forms are."""
    images: list = []
    upright = True
    matrix = pdfium_c.FS_MATRIX()

    def walk(parent, form, m, level: int) -> None:
        # m: (a, b, c, d) of the product of the containing forms' matrices, as PDFium's text page
        # composes them (CPDF_TextPage::ProcessFormObject).
        nonlocal upright
        objects, kinds, texts_upright = page_objects(parent, form is not None, m, upright)
        upright = upright and texts_upright
        for obj, kind in zip(objects, kinds):
            if kind != pdfium_c.FPDF_PAGEOBJ_IMAGE and kind != pdfium_c.FPDF_PAGEOBJ_FORM:
                continue
            obj = _Handle(obj)
            helper = pdfium.PdfObject(ctypes.cast(obj, pdfium_c.FPDF_PAGEOBJECT), page=page, pdf=page.pdf,
                                      container=form, level=level)
            if kind == pdfium_c.FPDF_PAGEOBJ_IMAGE:
                images.append(helper)
            elif level >= FORM_MAX_DEPTH - 1:
                upright = False  # text further down is on the text page but not looked at here
            else:
                # (the product is only looked at while the page is still upright)
                upright = upright and bool(_GET_MATRIX(obj, ctypes.byref(matrix)))
                a, b, c, d = matrix.a, matrix.b, matrix.c, matrix.d
                walk(obj, helper, (a * m[0] + b * m[2], a * m[1] + b * m[3], c * m[0] + d * m[2],
                                   c * m[1] + d * m[3]), level + 1)

    walk(_handle(page.raw), None, (1.0, 0.0, 0.0, 1.0), 0)
    return images, upright


def page_objects_python(parent: _Handle, form: bool, m, check_upright: bool) -> tuple[list[int], list[int], bool]:
    """The objects of a page or of a Form XObject (`form`) `parent`, as addresses, their kinds, and
    whether its text objects are all upright under m (`_upright`; True when not `check_upright`)."""
    count, get = (_FORM_COUNT_OBJECTS, _FORM_GET_OBJECT) if form else (_PAGE_COUNT_OBJECTS, _PAGE_GET_OBJECT)
    n = count(parent)
    if n < 0:
        raise pdfium.PdfiumError("Failed to get number of pageobjects.")
    objects = list(map(get, repeat(parent, n), range(n)))
    if not all(objects):
        raise pdfium.PdfiumError("Failed to get pageobject.")
    kinds = list(map(_GET_TYPE, objects))
    upright = not check_upright or _upright([o for o, k in zip(objects, kinds) if k == pdfium_c.FPDF_PAGEOBJ_TEXT], m)
    return [o.value for o in objects], kinds, upright


def _upright(texts: list, m) -> bool:
    """Whether all text objects `texts`, in forms whose matrix product is m, are drawn at an angle
    (FPDFText_GetCharAngle: atan2(b, a) of the text matrix times m, PDFium's CFX_Matrix product) that
    rounds to no quarter turn, with the margin of `UPRIGHT_TAN`."""
    matrices = (pdfium_c.FS_MATRIX * len(texts))()
    size = ctypes.sizeof(pdfium_c.FS_MATRIX)
    refs = map(ctypes.byref, repeat(matrices), range(0, len(texts) * size, size))
    if not all(map(_GET_MATRIX, texts, refs)):
        return False
    values = _floats(matrices)  # a, b, c, d, e, f per matrix
    m0, m1, m2, m3 = m
    return all(a * m0 + b * m2 > 0 and abs(a * m1 + b * m3) <= UPRIGHT_TAN * (a * m0 + b * m2)
               for a, b in zip(values[0::6], values[1::6]))


def _floats(structs) -> list[float]:
    """The float fields of a ctypes array of all-float structs, in memory order."""
    return memoryview(structs).cast("B").cast("f").tolist()


def _kind(u: int) -> tuple[int, str]:
    """A text-page code point's kind (0: carries nothing, _NEWLINE, _SPACE, _GLYPH) and text."""
    if u in (0x0A, 0x0D):
        return _NEWLINE, ""
    ch = _char(u)
    if ch is None:
        return 0, ""
    if ch.isspace():
        return _SPACE, ""
    return _GLYPH, ch


def _lines(textpage, visible, upright: bool) -> list[_Line]:
    """The page's characters grouped into lines, in stream order, then `_rejoin`ed.

    PDFium is asked per character in one loop each (`char_codes`, `visible_glyphs`: compiled, else
    inside map(); then the visible glyphs' angles unless the page is `upright`); the glyphs are grouped
    into lines by `group_chars` and each line's box is `line_boxes`'s."""
    handle = _handle(textpage.raw)
    n = max(pdfium_c.FPDFText_CountChars(textpage), 0)
    codes = char_codes(handle, n)
    # Per code point: its text, whether it is a glyph, and its weight in a running count of line
    # breaks (high bits) and spaces (low bits), whose steps from glyph to glyph say what came between.
    text, glyph, weight = {}, {}, {}
    for u in set(codes):
        kind, text[u] = _kind(u)
        glyph[u] = kind == _GLYPH
        weight[u] = _NEWLINE_WEIGHT if kind == _NEWLINE else int(kind == _SPACE)
    glyphs = list(compress(range(n), map(glyph.__getitem__, codes)))
    index, *box = visible_glyphs(handle, glyphs, visible)
    m = len(index)
    if upright:
        quarters = [0] * m
        frame = box
    else:
        # PDFium's angle turns clockwise (text running down the page is pi/2); q counts
        # counterclockwise quarter turns, as in PDF's y-up space.
        quarters = [-round(angle / (math.pi / 2)) % 4 if angle >= 0 else 0
                    for angle in map(_GET_CHAR_ANGLE, repeat(handle), index)]
        frame = [list(v) for v in zip(*map(_to_frame, zip(*box), quarters))] or [[], [], [], []]
    counts = list(accumulate(map(weight.__getitem__, codes)))
    at = list(map(counts.__getitem__, index))
    steps = [0] + list(map(operator.sub, at[1:], at[:-1]))

    starts, gap_splits, spaced = group_chars(*frame, quarters, steps, _NEWLINE_WEIGHT, LINE_SPLIT_GAP,
                                             NEWLINE_CONTINUE_GAP, SPACE_GAP)
    texts = list(map(text.__getitem__, map(codes.__getitem__, index)))
    for i in spaced:
        texts[i] = " " + texts[i]
    f0, f1, f2, f3 = frame
    fboxes = line_boxes(*frame, starts, m)
    pboxes = fboxes if upright else line_boxes(*box, starts, m)
    lines = []
    for s, e, gap_split, fbox, pbox in zip(starts, starts[1:] + [m], gap_splits, fboxes, pboxes):
        lines.append(_Line(quarters[s], *fbox, list(pbox), "".join(texts[s:e]), f0[e - 1], f2[e - 1],
                           gap_split))
    return _rejoin(lines)


def line_boxes_python(x0s: list, y0s: list, x1s: list, y1s: list, starts: list[int], m: int) -> list[list]:
    """Per line (glyphs starts[k] up to the next start, the last up to m): the smallest x0 and y0 and
    the largest x1 and y1 of its glyphs."""
    return [[min(x0s[s:e]), min(y0s[s:e]), max(x1s[s:e]), max(y1s[s:e])] for s, e in zip(starts, starts[1:] + [m])]


def group_chars_python(f0: list, f1: list, f2: list, f3: list, quarters: list, steps: list,
                       newline_weight: int, split_gap: float, continue_gap: float,
                       space_gap: float) -> tuple[list[int], list[bool], list[int]]:
    """The line grouping of `_lines` over a page's visible glyphs in stream order (the oracle of the
    compiled extract/_pdflines.c, which `group_chars` is where it was built): each glyph's box in its
    text frame (f0..f3: left, bottom, right, top), its quarter turns and its step (line breaks and
    spaces PDFium put since the glyph before, see `_lines`), and the module's constants it is given
    (_NEWLINE_WEIGHT, LINE_SPLIT_GAP, NEWLINE_CONTINUE_GAP, SPACE_GAP). Returns the glyphs that start a
    line, whether each such start was a gap split, and the glyphs a space goes before."""
    starts, gap_splits, spaced = [], [], []
    fy0 = fy1 = last_x0 = last_x1 = back = gutter = 0.0
    line_q = -1
    for i, (a0, a1, a2, a3, q, step) in enumerate(zip(f0, f1, f2, f3, quarters, steps)):
        if (step < newline_weight and q == line_q and fy0 <= a1 and a3 <= fy1 and a1 < a3
                and a0 >= last_x0 - back and not a0 - last_x1 > gutter):
            # The short path, the outcome of the long one for most characters: no line break from
            # PDFium, the box lies within the line's extent, so the overlap is its height and passes
            # the baseline test, the x tests are those of _breaks_line, and the extent stays.
            if step:  # a space came between
                spaced.append(i)
            last_x0, last_x1 = a0, a2
            continue
        newline, space, f = step >= newline_weight, step % newline_weight > 0, (a0, a1, a2, a3)
        h = fy1 - fy0
        brk = (None if line_q < 0 else "line" if q != line_q
               else _breaks_line(fy0, fy1, last_x0, last_x1, f, split_gap))
        if newline:
            # PDFium breaks lines at superscripts too ("km2" / ")"): a break is kept unless the
            # character carries on right after the last one on the same line.
            gap = a0 - last_x1
            if brk or gap > continue_gap * h:
                brk = "line"
            else:
                space = gap > space_gap * h
        if brk or line_q < 0:
            starts.append(i)
            gap_splits.append(brk == "gap")
            fy0, fy1, line_q = a1, a3, q
        else:
            if space:
                spaced.append(i)
            fy0, fy1 = min(fy0, a1), max(fy1, a3)
        h = fy1 - fy0
        back, gutter = 0.5 * h, split_gap * h  # the x tests of _breaks_line for the short path
        last_x0, last_x1 = a0, a2

    return starts, gap_splits, spaced


def char_codes_python(handle: _Handle, n: int) -> list[int]:
    """The code points of a text page's first `n` characters (FPDFText_GetUnicode)."""
    return list(map(_GET_UNICODE, repeat(handle, n), range(n)))


def visible_glyphs_python(handle: _Handle, glyphs: list[int], visible) -> tuple[list, list, list, list, list]:
    """The character indices of `glyphs` whose loose box (FPDFText_GetLooseCharBox) PDFium gives and
    whose centre lies in `visible` (x0, y0, x1, y1), and those boxes' lefts, bottoms, rights and tops
    (float32 values, as Python floats)."""
    rects = (pdfium_c.FS_RECTF * len(glyphs))()
    size = ctypes.sizeof(pdfium_c.FS_RECTF)
    refs = map(ctypes.byref, repeat(rects), range(0, len(glyphs) * size, size))
    found = list(map(_GET_LOOSE_CHAR_BOX, repeat(handle), glyphs, refs))
    values = _floats(rects)  # FS_RECTF: left, top, right, bottom
    lefts, tops, rights, bottoms = values[0::4], values[1::4], values[2::4], values[3::4]
    x0, y0, x1, y1 = visible
    keep = [ok and x0 <= (l + r) / 2 <= x1 and y0 <= (b + t) / 2 <= y1
            for ok, l, t, r, b in zip(found, lefts, tops, rights, bottoms)]
    return list(compress(glyphs, keep)), *(list(compress(v, keep)) for v in (lefts, bottoms, rights, tops))


try:  # built by `pip install` (setup.py) where a C compiler is; they call PDFium through its addresses
    from extract import _pdflines

    def _address(name: str) -> int:
        return ctypes.cast(getattr(pdfium_c, name), ctypes.c_void_p).value

    group_chars, line_boxes = _pdflines.group_chars, _pdflines.line_boxes
    _UNICODE_AT, _LOOSE_BOX_AT = _address("FPDFText_GetUnicode"), _address("FPDFText_GetLooseCharBox")

    def char_codes(handle: _Handle, n: int) -> list[int]:
        return _pdflines.char_codes(handle.value or 0, n, _UNICODE_AT)

    def visible_glyphs(handle: _Handle, glyphs: list[int], visible) -> tuple[list, list, list, list, list]:
        return _pdflines.visible_glyphs(handle.value or 0, glyphs, tuple(map(float, visible)), _LOOSE_BOX_AT)

    _OBJECT_FUNCTIONS = {form: tuple(map(_address, names)) for form, names in (
        (False, ("FPDFPage_CountObjects", "FPDFPage_GetObject", "FPDFPageObj_GetType", "FPDFPageObj_GetMatrix")),
        (True, ("FPDFFormObj_CountObjects", "FPDFFormObj_GetObject", "FPDFPageObj_GetType",
                "FPDFPageObj_GetMatrix")))}

    def page_objects(parent: _Handle, form: bool, m, check_upright: bool) -> tuple[list[int], list[int], bool]:
        found = _pdflines.page_objects(parent.value or 0, form, tuple(map(float, m)), check_upright, UPRIGHT_TAN,
                                       pdfium_c.FPDF_PAGEOBJ_TEXT, *_OBJECT_FUNCTIONS[form])
        if isinstance(found, str):
            raise pdfium.PdfiumError(found)
        return found
except ImportError:
    group_chars, char_codes, visible_glyphs = group_chars_python, char_codes_python, visible_glyphs_python
    page_objects, line_boxes = page_objects_python, line_boxes_python


def _rejoin(lines: list[_Line]) -> list[_Line]:
    """Undo the gap splits that are no column gutter: a split stays only where no line within
    `GUTTER_WINDOW` line heights above or below crosses the middle of the gap. A stretched justified
    line ("relations.      While") has its column's other lines across the gap; a row of an
    interleaved two-column stream has the gutter free around it."""
    if not any(line.gap_split for line in lines):
        return lines
    # The lines by bottom edge, to look only at those near a gap.
    by_bottom = sorted(lines, key=lambda l: l.fy0)
    bottoms = [l.fy0 for l in by_bottom]
    tallest = max(l.height for l in lines)
    out: list[_Line] = []
    for line in lines:
        if line.gap_split and out and not _gutter(out[-1], line, by_bottom, bottoms, tallest):
            prev = out[-1]
            prev.text += " " + line.text
            prev.extend((line.fx0, line.fy0, line.fx1, line.fy1), line.box)
            prev.last_x0, prev.last_x1 = line.last_x0, line.last_x1
        else:
            out.append(line)
    return out


def _gutter(left: _Line, right: _Line, by_bottom: list[_Line], bottoms: list[float], tallest: float) -> bool:
    mid = (left.last_x1 + right.fx0) / 2
    reach = GUTTER_WINDOW * left.height
    top, bottom = max(left.fy1, right.fy1) + reach, min(left.fy0, right.fy0) - reach
    near = by_bottom[bisect.bisect_left(bottoms, bottom - tallest):bisect.bisect_left(bottoms, top)]
    return not any(o.q == left.q and o.fx0 < mid < o.fx1 and o.fy1 > bottom
                   for o in near if o is not left and o is not right)


def _char(u: int) -> str | None:
    """A text-page code point as text, or None for what carries none (unmapped, control, surrogate)."""
    if u == 0x02:  # PDFium's mark for a hyphen it found at a line end
        return "-"
    if u == 0 or u > 0x10FFFF or 0xD800 <= u <= 0xDFFF or u in (0xFFFE, 0xFFFF):
        return None
    ch = chr(u)
    if 0xFB00 <= u <= 0xFB06:  # ff, fi, fl, ffi, ffl, long st, st
        return unicodedata.normalize("NFKC", ch)
    if unicodedata.category(ch) == "Cc" and not ch.isspace():
        return None
    return ch


def _breaks_line(fy0: float, fy1: float, last_x0: float, last_x1: float, f,
                 split_gap: float = LINE_SPLIT_GAP) -> str | None:
    """"line" when the character `f` starts another line than the one of vertical extent fy0..fy1
    whose last character spans last_x0..last_x1, "gap" when it continues that line's baseline after a
    gap wide enough to be a column gutter, else None."""
    h = fy1 - fy0
    overlap = min(fy1, f[3]) - max(fy0, f[1])
    # A jump back is measured from the last character's left edge: the code points of one ligature
    # glyph ("ffi") share its box, and kerning overlaps boxes only slightly.
    if overlap < 0.5 * min(h, f[3] - f[1]) or f[0] < last_x0 - 0.5 * h:
        return "line"
    return "gap" if f[0] - last_x1 > split_gap * h else None


def _to_frame(box, q: int):
    """`box` rotated by -q quarter turns, so that text at angle q runs left to right, y up."""
    x0, y0, x1, y1 = box
    if q == 0:
        return box
    if q == 1:
        return (y0, -x1, y1, -x0)
    if q == 2:
        return (-x1, -y1, -x0, -y0)
    return (-y1, x0, -y0, x1)


def _to_display(box, rotation: int, visible):
    """A page-space box as the page is displayed (/Rotate, clockwise degrees), origin bottom-left."""
    x0, y0, x1, y1 = box
    left, bottom, right, top = visible
    if rotation == 90:
        return (y0 - bottom, right - x1, y1 - bottom, right - x0)
    if rotation == 180:
        return (right - x1, top - y1, right - x0, top - y0)
    if rotation == 270:
        return (top - y1, x0 - left, top - y0, x1 - left)
    return (x0 - left, y0 - bottom, x1 - left, y1 - bottom)


def _blocks(lines: list[_Line]) -> list[_Line]:
    """Lines grouped into paragraphs, top-down per orientation (see the module docstring)."""
    blocks: list[_Line] = []
    open_blocks: list[_Line] = []  # those a later line can still join
    for line in sorted(lines, key=lambda l: (l.q, -l.fy1, l.fx0)):
        # Lines come top-down, so a block whose last line is already too far above this one is
        # out of reach of every later line too.
        open_blocks = [b for b in open_blocks if b.q == line.q
                       and b.lines[-1].fy0 - line.fy1 <= BLOCK_MAX_GAP * b.lines[-1].height]
        best, best_key = None, None
        for block in open_blocks:
            last = block.lines[-1]
            h = min(last.height, line.height)
            gap = last.fy0 - line.fy1
            if not -0.3 * h <= gap <= BLOCK_MAX_GAP * h:
                continue
            if max(last.height, line.height) > BLOCK_HEIGHT_RATIO * max(h, 1e-6):
                continue
            overlap = min(last.fx1, line.fx1) - max(last.fx0, line.fx0)
            if overlap < 0.5 * min(last.fx1 - last.fx0, line.fx1 - line.fx0):
                continue
            key = (abs(gap), -overlap)
            if best_key is None or key < best_key:
                best, best_key = block, key
        if best is not None and _starts_paragraph(best, line):
            best = None
        if best is None:
            block = _Line(line.q, line.fx0, line.fy0, line.fx1, line.fy1, list(line.box))
            block.lines.append(line)
            blocks.append(block)
            open_blocks.append(block)
        else:
            best.lines.append(line)
            best.extend((line.fx0, line.fy0, line.fx1, line.fy1), line.box)
    return blocks


def _starts_paragraph(block: _Line, line: _Line) -> bool:
    """An indented line after a line that ends short of the block's right edge."""
    h = line.height
    last = block.lines[-1]
    return line.fx0 > block.fx0 + PARAGRAPH_INDENT * h and last.fx1 < block.fx1 - PARAGRAPH_SHORT_END * h


def _block_text(block: _Line) -> str:
    text = ""
    for line in block.lines:
        t = line.text.strip()
        if not t:
            continue
        if not text:
            text = t
        elif text.endswith(_SOFT_HYPHEN):
            text = text[:-1] + t
        elif text[-1] in _HARD_HYPHENS:
            lowercase_continuation = len(text) > 1 and text[-2].isalpha() and t[0].islower()
            text = (text[:-1] if lowercase_continuation else text) + t
        else:
            text += " " + t
    return " ".join(text.replace(_SOFT_HYPHEN, "").split())


def _images(objects: list, page_no: int, visible, min_image_side: int, skipped: _Skipped,
            encode: bool = True) -> list[dict]:
    """The page's image nodes after the size rules; without `encode`, with "format" and "data" None
    (and undecodable images not found out)."""
    nodes = []
    page_area = _area(visible)
    for obj in objects:
        try:
            width, height = obj.get_px_size()
            if min(width, height) < min_image_side:
                continue
            box = _clip(_page_box(obj), visible)
            if box is None or _area(box) < MIN_IMAGE_AREA * page_area:
                continue
            if not encode:
                encoded = None if width * height > MAX_BITMAP_PIXELS else (None, None)
            else:
                encoded = _encode(obj, width, height)
        except pdfium.PdfiumError:
            skipped.undecodable += 1
            continue
        if encoded is None:
            skipped.oversized += 1
            continue
        fmt, data = encoded
        nodes.append({"type": "image", "page": page_no, "index": len(nodes), "bbox": _round(box),
                      "width": width, "height": height, "format": fmt, "data": data, "caption": None})
    return nodes


def _page_box(obj):
    """The image's corners mapped through every containing form object's matrix, as a page box."""
    corners = obj.get_quad_points()
    container = obj.container
    while container is not None:
        matrix = container.get_matrix()
        corners = [matrix.on_point(x, y) for x, y in corners]
        container = container.container
    xs, ys = [c[0] for c in corners], [c[1] for c in corners]
    return (min(xs), min(ys), max(xs), max(ys))


def _encode(obj, width: int, height: int):
    """("JPEG", the DCT stream) or ("PNG", the decoded bitmap), or None when too large to decode."""
    if obj.get_filters(skip_simple=True) == ["DCTDecode"]:
        data = bytes(obj.get_data(decode_simple=True))
        if data.startswith(b"\xff\xd8"):
            return "JPEG", data
    if width * height > MAX_BITMAP_PIXELS:
        return None
    bitmap = obj.get_bitmap(render=False)
    try:
        image = bitmap.to_pil()
        if image.mode not in ("L", "RGB", "RGBA"):
            image = image.convert("RGB")
        out = io.BytesIO()
        # zlib level 1: 2-4x faster than PIL's default 6 on the dev PDFs' figures, ~10% more bytes.
        image.save(out, format="PNG", compress_level=1)
    finally:
        bitmap.close()
    return "PNG", out.getvalue()


def _attach_captions(order: list[int], items: list[dict], display: list, background: set) -> None:
    """Set "caption" of each image to the caption block next to it (see the module docstring)."""
    for pos, i in enumerate(order):
        if items[i]["type"] == "image" and i not in background:
            items[i]["caption"] = _caption(pos, order, items, display)


def _caption(pos: int, order: list[int], items: list[dict], display: list) -> str | None:
    img = display[order[pos]]
    slack = 0.1 * (img[3] - img[1])
    for step in (1, -1):  # below first, then above
        for j in range(pos + step, pos + step * (CAPTION_REACH + 1), step):
            if not 0 <= j < len(order):
                break
            item = items[order[j]]
            if item["type"] == "image":
                continue
            t = display[order[j]]
            beside = t[3] <= img[1] + slack if step == 1 else t[1] >= img[3] - slack
            if beside and min(t[2], img[2]) > max(t[0], img[0]) and CAPTION.match(item["text"]):
                return item["text"]
            if len(item["text"]) > CAPTION_SKIP_CHARS:
                break
    return None


def _cut(idx: list[int], boxes, min_gap: float, out: list[int]) -> None:
    """Appends the reading order of `idx` to `out`; a stack of regions, not recursion, so that a
    page of thousands of blocks cannot exhaust Python's recursion limit."""
    stack = [idx]
    while stack:
        region = stack.pop()
        parts = _cut_once(region, boxes, min_gap)
        if parts is None:
            out.extend(sorted(region, key=lambda i: (-boxes[i][3], boxes[i][0])))
        else:
            stack.extend(reversed(parts))


def _cut_once(idx: list[int], boxes, min_gap: float) -> list[list[int]] | None:
    """`idx` cut into strips (top to bottom) or else columns (left to right), None if neither."""
    if len(idx) <= 1:
        return None
    rows = _split(idx, boxes, 1, min_gap)
    if len(rows) > 1:
        strips = [rows[0]]
        for row in rows[1:]:
            if _shares_columns(strips[-1], row, boxes, min_gap):
                strips[-1] = strips[-1] + row
            else:
                strips.append(row)
        if len(strips) > 1:
            return strips
    cols = _split(idx, boxes, 0, min_gap)
    return cols if len(cols) > 1 else None


def _shares_columns(upper: list[int], lower: list[int], boxes, min_gap: float) -> bool:
    """Whether two consecutive strips are parts of one column section: their union splits into
    columns, one strip has boxes in every column (the other may fill only some: a column running
    on below the other's end), and each strip's boxes in each column are column text."""
    cols = _split(upper + lower, boxes, 0, min_gap)
    if len(cols) < 2:
        return False
    parts = [[[i for i in col if i in strip] for col in cols] for strip in (set(upper), set(lower))]
    if not any(all(p) for p in parts):
        return False
    for col, *strip_parts in zip(cols, *parts):
        if any(p and not _column_text(p, col, boxes) for p in strip_parts):
            return False
    return True


def _column_text(part: list[int], col: list[int], boxes) -> bool:
    """Boxes that fill at least `GLUE_MIN_WIDTH` of the column's width or align with its left or
    right edge (short ragged lines of an index, a list, a paragraph's end)."""
    x0, x1 = _span(part, boxes)
    c0, c1 = _span(col, boxes)
    tolerance = GLUE_ALIGN * (c1 - c0)
    return x1 - x0 >= GLUE_MIN_WIDTH * (c1 - c0) or abs(x0 - c0) <= tolerance or abs(x1 - c1) <= tolerance


def _span(idx: list[int], boxes) -> tuple[float, float]:
    return min(boxes[i][0] for i in idx), max(boxes[i][2] for i in idx)


def _split(idx: list[int], boxes, axis: int, min_gap: float) -> list[list[int]]:
    """`idx` split at the whitespace gaps (>= min_gap) of its projection on `axis` (0: x, columns
    left to right; 1: y, rows top to bottom)."""
    lo, hi = axis, axis + 2

    def span(i):  # (start, end) along the reading direction: y is up, so the top row comes first
        return (-boxes[i][hi], -boxes[i][lo]) if axis == 1 else (boxes[i][lo], boxes[i][hi])

    groups, reach = [], None
    for i in sorted(idx, key=lambda i: span(i)[0]):
        start, end = span(i)
        if reach is None or start - reach >= min_gap:
            groups.append([i])
            reach = end
        else:
            groups[-1].append(i)
            reach = max(reach, end)
    return groups


def _clip(box, visible):
    x0, y0 = max(box[0], visible[0]), max(box[1], visible[1])
    x1, y1 = min(box[2], visible[2]), min(box[3], visible[3])
    return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None


def _area(box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _contains(box, point) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def _round(box) -> list[float]:
    return [round(float(v), 2) for v in box]
