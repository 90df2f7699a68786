"""PDF parsing (extract/pdf.py): reading order by XY-cut on synthetic layouts and on real papers,
images (nested Form XObjects, the size rules, raw JPEG pass-through), captions, the failure reasons,
determinism. Real PDFs are the fixtures in tests/data/pdf (see its SOURCE.md); the synthetic ones are
written here in raw PDF syntax, so every coordinate they test is known."""

import ctypes
import difflib
import io
import json
import pickle
import re
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from extract.pdf import (CAPTION, FORM_MAX_DEPTH, _lines, _page_objects, _parse_page, _Skipped, _to_display,
                         parse_pdf, xy_cut)

DATA = Path(__file__).parent / "data" / "pdf"
LABELS = {json.loads(line)["path"].rsplit("/", 1)[-1]: json.loads(line)
          for line in (DATA / "labels.jsonl").read_text().splitlines()}


def pdf_bytes(name: str) -> bytes:
    return (DATA / name).read_bytes()


@lru_cache(maxsize=None)
def parsed(name: str, min_image_side: int = 150) -> dict:
    return parse_pdf(pdf_bytes(name), min_image_side=min_image_side)


def norm(s: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", s.lower()).split())


def coverage(needle: str, haystack: str) -> float:
    """In-order character coverage of `needle` in `haystack` (both normalised): the matched
    characters of difflib's matching blocks over the needle's length."""
    a, b = norm(needle), norm(haystack)
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return sum(m.size for m in blocks) / len(a)


# --- raw PDF syntax -------------------------------------------------------------------------------

def stream(entries: bytes, data: bytes) -> bytes:
    return b"<< " + entries + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def pdf(objects: list[bytes]) -> bytes:
    """A PDF of `objects` (object 1 the catalog) with a correct xref table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def document(pages: list[bytes], xobjects: tuple[bytes, ...] = (), rotate: int = 0) -> bytes:
    """Pages of 612x792 pt drawing with `pages` content streams. Object 3 is Helvetica (/F1), the
    `xobjects` are objects 4, 5, ... named /X4, /X5, ... on every page."""
    first_page = 4 + len(xobjects)
    kids = b" ".join(b"%d 0 R" % (first_page + 2 * k) for k in range(len(pages)))
    names = b" ".join(b"/X%d %d 0 R" % (4 + k, 4 + k) for k in range(len(xobjects)))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages)),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>", *xobjects]
    for k, content in enumerate(pages):
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Rotate %d /Contents %d 0 R "
                       b"/Resources << /Font << /F1 3 0 R >> /XObject << %s >> >> >>"
                       % (rotate, first_page + 2 * k + 1, names))
        objects.append(stream(b"", content))
    return pdf(objects)


def text(x: float, y: float, s: str, size: float = 10, matrix: str = "1 0 0 1") -> bytes:
    return f"BT /F1 {size} Tf {matrix} {x} {y} Tm ({s}) Tj ET\n".encode("latin-1")


def gradient(w: int, h: int) -> bytes:
    """RGB pixels, row by row from the top: (x mod 256, y mod 256, 0)."""
    return b"".join(bytes((x % 256, y % 256, 0)) for y in range(h) for x in range(w))


def rgb_image(w: int, h: int) -> bytes:
    return stream(b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB "
                  b"/BitsPerComponent 8 /Filter /FlateDecode" % (w, h), zlib.compress(gradient(w, h)))


def form(content: bytes, matrix: bytes, resources: bytes) -> bytes:
    return stream(b"/Type /XObject /Subtype /Form /BBox [-2000 -2000 2000 2000] /Matrix [%s] "
                  b"/Resources << %s >>" % (matrix, resources), content)


def ink(page) -> tuple:
    """(top, left), (bottom, right) pixel bounds of what PDFium paints on `page` at 72 dpi, as
    displayed (rows from the top)."""
    bitmap = page.render(scale=1)
    painted = np.argwhere(bitmap.to_numpy()[:, :, :3].min(axis=2) < 250)
    bitmap.close()
    return painted.min(axis=0), painted.max(axis=0) + 1


def mat(a, b, c, d, e, f):
    return np.array([[a, b, 0], [c, d, 0], [e, f, 1]], dtype=float)


# --- XY-cut on synthetic layouts ------------------------------------------------------------------

def order_of(layout: dict) -> list[str]:
    names = list(layout)
    return [names[i] for i in xy_cut([layout[n] for n in names])]


def test_xy_cut_two_columns_under_a_full_width_header():
    # Paragraph breaks of both columns line up at y 500-510 and 300-310: plain XY-cut would cut the
    # columns there and read L1 R1 L2 R2 ...; the strips share the gutter (300-320), so they are
    # glued back. The page number sits in the gutter, under the columns.
    layout = {
        "title": [72, 720, 540, 760], "authors": [150, 690, 460, 710],
        "R1": [320, 510, 540, 680], "L1": [72, 510, 300, 680],
        "L2": [72, 310, 300, 500], "R2": [320, 310, 540, 500],
        "L3": [72, 100, 300, 300], "R3": [320, 150, 540, 300],
        "page": [302, 60, 318, 72],
    }
    assert order_of(layout) == ["title", "authors", "L1", "L2", "L3", "R1", "R2", "R3", "page"]


def test_xy_cut_full_width_figure_between_column_sections():
    layout = {
        "header": [72, 740, 540, 760],
        "A-L1": [72, 600, 300, 730], "A-L2": [72, 520, 300, 590],
        "A-R1": [320, 600, 540, 730], "A-R2": [320, 520, 540, 590],
        "figure": [72, 330, 540, 500], "caption": [72, 300, 540, 320],
        "B-L": [72, 80, 300, 280], "B-R": [320, 80, 540, 280],
    }
    assert order_of(layout) == ["header", "A-L1", "A-L2", "A-R1", "A-R2", "figure", "caption", "B-L", "B-R"]


def test_xy_cut_three_columns_and_a_column_running_on():
    layout = {
        "title": [40, 740, 570, 770],
        "c1a": [40, 500, 200, 720], "c1b": [40, 100, 200, 480],
        "c2a": [225, 500, 385, 720], "c2b": [225, 300, 385, 480],
        "c3a": [410, 500, 570, 720],
        # column 3 ends at 500; columns 1 and 2 run on below it, in strips of their own.
        "c1c": [40, 40, 200, 90], "c2c": [225, 40, 385, 90],
    }
    assert order_of(layout) == ["title", "c1a", "c1b", "c1c", "c2a", "c2b", "c2c", "c3a"]


def test_xy_cut_ragged_index_columns_and_a_page_number_under_one_column():
    # An index: short entries aligned with their column's left edge are column text, so the strips
    # they sit in are glued; a page number centred under the left column is not.
    layout = {
        "L1": [90, 600, 290, 700], "R1": [332, 600, 500, 700],
        "L2": [90, 560, 113, 590], "R2": [332, 560, 475, 590],
        "L3": [90, 400, 200, 550], "R3": [332, 400, 480, 550],
        "page": [185, 60, 195, 70],
    }
    assert order_of(layout) == ["L1", "L2", "L3", "R1", "R2", "R3", "page"]


def test_xy_cut_without_gaps_reads_top_down():
    assert xy_cut([[0, 0, 100, 50], [10, 40, 90, 120], [50, 30, 200, 60]]) == [1, 2, 0]


# --- text on real two-column papers ----------------------------------------------------------------

def test_abstract_opens_the_first_text_nodes_of_the_acl_paper():
    nodes = [n for n in parsed("N18-3011.pdf")["nodes"] if n["type"] == "text"]
    abstract = LABELS["N18-3011.pdf"]["abstract_first_300"]
    first = " ".join(n["text"] for n in nodes[:8])   # title, authors, affiliations, "Abstract", abstract
    # The label's ratio is 1.0 on pages 1-2; in the first 8 nodes, in order, we get all of it:
    # the lines of the abstract come back in order and de-hyphenated ("litera-" + "ture").
    assert coverage(abstract, first) == 1.0
    assert norm(abstract)[:250] in norm(first)
    assert "scientific literature into a heterogeneous graph to facilitate algorithmic" in first


def test_left_column_before_right_column():
    for name, page in (("N18-3011.pdf", 2), ("multicolumn.pdf", 1), ("multicolumn.pdf", 2)):
        nodes = [n for n in parsed(name)["nodes"] if n["type"] == "text" and n["page"] == page]
        sides = "".join("L" if n["bbox"][2] < 306 else "R" if n["bbox"][0] > 300 else "-"
                        for n in nodes if len(n["text"]) > 40)          # body blocks, no page numbers
        assert re.fullmatch(r"-*L{2,}R{2,}", sides), (name, page, sides)


def test_two_column_abstract_of_the_latex_sample():
    nodes = [n for n in parsed("multicolumn.pdf")["nodes"] if n["type"] == "text"]
    assert [n["text"] for n in nodes[:5]] == [
        "Two-Column Document with Lorem Ipsum", "Your Name", "January 3, 2024", "Abstract",
        LABELS["multicolumn.pdf"]["abstract_first_300"]]
    # The table on p. 3: PDFium breaks the line after the superscript ("km2" / ")"), and the three
    # code points of the "ffi" ligature share one box; both stay in their line. Rows read across.
    table = " | ".join(n["text"] for n in nodes if n["page"] == 3)
    assert ("Population (millions) Area (km2) Capital | Official Language | "
            "Austria 8.9 83,879 Vienna German ") in table


def test_lines_blocks_and_dehyphenation():
    content = (text(72, 700, "An exam-") + text(72, 688, "ple of the MED-") + text(72, 676, "LINE index")
               # a second paragraph after a gap of two lines; a stretched justified line in it
               + text(72, 640, "Second") + text(250, 640, "paragraph.")
               + text(72, 628, "It goes on here, across the column, as far as its right edge."))
    result = parse_pdf(document([content]))
    assert result["reason"] is None
    assert [n["text"] for n in result["nodes"]] == ["An example of the MED-LINE index",
                                                    "Second paragraph. It goes on here, across the "
                                                    "column, as far as its right edge."]
    x0, y0, x1, y1 = result["nodes"][0]["bbox"]
    assert x0 == pytest.approx(72, abs=1) and 670 < y0 < 676 and 700 < y1 < 712
    # No paragraph spacing: an indented line after a line that ends short starts a paragraph; the
    # lines of a hanging-indent item (the line before is full) do not.
    content = (text(72, 700, "A paragraph whose first line is long enough to set the edge.")
               + text(72, 688, "Its short end.") + text(90, 676, "An indented first line")
               + text(72, 664, "and the margin again.")
               + text(72, 652, "- a list item that is long enough to reach the edge again, too")
               + text(80, 640, "with its hanging indent."))
    assert [n["text"] for n in parse_pdf(document([content]))["nodes"]] == [
        "A paragraph whose first line is long enough to set the edge. Its short end.",
        "An indented first line and the margin again. - a list item that is long enough to reach the "
        "edge again, too with its hanging indent."]


@pytest.mark.parametrize("rotate", [0, 90, 180, 270])
def test_rotated_page_is_read_as_displayed(rotate):
    # /Rotate turns the page clockwise for display; text drawn turned counterclockwise by as much
    # reads upright. The second line sits one line pitch "down" the displayed page and comes first
    # in the stream.
    cos, sin = round(np.cos(np.radians(rotate))), round(np.sin(np.radians(rotate)))
    matrix = f"{cos} {sin} {-sin} {cos}"
    x, y = 250, 400
    content = (text(x + 30 * sin, y - 30 * cos, "shown second", matrix=matrix)
               + text(x, y, "shown first", matrix=matrix))
    result = parse_pdf(document([content], rotate=rotate))
    assert [n["text"] for n in result["nodes"]] == ["shown first", "shown second"]
    # The display boxes the XY-cut works on are where PDFium's rendering puts things.
    data = document([b"q 200 0 0 100 50 600 cm /X4 Do Q"], (rgb_image(20, 10),), rotate=rotate)
    doc = pdfium.PdfDocument(data)
    page = doc[0]
    display = _to_display((50, 600, 250, 700), rotate, page.get_bbox())
    (top, left), (bottom, right) = ink(page)
    height = page.get_height()
    page.close()
    doc.close()
    assert [left, height - bottom, right, height - top] == pytest.approx(display, abs=1)


def test_margin_stamp_is_one_line():
    # An arXiv-style stamp up the left margin of an upright page is one line, read as the leftmost column.
    stamp = text(30, 250, "arXiv:1905.00001v1 [cs.CL] 1 May 2019", size=20, matrix="0 1 -1 0")
    result = parse_pdf(document([stamp + text(72, 700, "Title") + text(72, 600, "Body.")]))
    assert [n["text"] for n in result["nodes"]] == ["arXiv:1905.00001v1 [cs.CL] 1 May 2019", "Title", "Body."]


def test_raw_object_walk_and_upright_pages_match_the_per_object_and_per_character_calls():
    # _page_objects walks the page objects with raw calls and tells from the text objects' matrices
    # (times their forms') whether the page needs per-character angles; it must give the images
    # get_objects gives, and the lines of the per-character angles.
    def address(raw):
        return ctypes.cast(raw, ctypes.c_void_p).value

    def chain(obj):
        return None if obj is None else (address(obj.raw), obj.level, chain(obj.container))

    line = text(72, 300, "Upright line")
    stamp = text(30, 250, "arXiv:1905.00001v1 [cs.CL]", size=20, matrix="0 1 -1 0")
    fonts = b"/Font << /F1 3 0 R >>"
    straight, turned, turned_back = b"1 0 0 1 0 0", b"0 1 -1 0 600 0", b"0 -1 1 0 0 600"
    # (content, the form X4 it draws, whether the page is upright). PDFium folds a form's /Matrix
    # into its objects; the cm in force at its Do is the form object's own matrix.
    synthetic = [
        (line, None, True),
        (line + stamp, None, False),                                             # margin stamp
        (b"/X4 Do\n", form(line, turned, fonts), False),                         # a turning /Matrix
        (b"q %s cm /X4 Do Q\n" % turned, form(line, straight, fonts), False),    # a form drawn turned
        (b"q %s cm /X4 Do Q\n" % turned_back, form(stamp, straight, fonts), True),  # turned text turned back
    ]
    cases = [(document([content], (xobject,) if xobject else ()), upright)
             for content, xobject, upright in synthetic]
    cases += [(pdf_bytes(name), None) for name in ("N18-3011.pdf", "multicolumn.pdf",
                                                  "imagemagick-images.pdf")]
    for data, expected_upright in cases:
        doc = pdfium.PdfDocument(data)
        for page in doc:
            images, upright = _page_objects(page)
            expected = page.get_objects(filter=(pdfium.raw.FPDF_PAGEOBJ_IMAGE,), max_depth=FORM_MAX_DEPTH)
            assert [chain(o) for o in images] == [chain(o) for o in expected]
            assert expected_upright in (None, upright)
            textpage = page.get_textpage()
            if upright:
                angles = map(pdfium.raw.FPDFText_GetCharAngle, [textpage] * textpage.count_chars(),
                             range(textpage.count_chars()))
                assert all(round(a / (np.pi / 2)) % 4 == 0 for a in angles if a >= 0)
            assert _lines(textpage, page.get_bbox(), upright) == _lines(textpage, page.get_bbox(), False)
            textpage.close()
            page.close()
        doc.close()


def test_caption_regex():
    for s in ("Figure 1: Part of the graph", "Fig. 2 shows", "FIG 3", "Table 4", "TABLE IV. Results",
              "Abbildung 1.11: Knoten", "Abb. 5", "Tabelle 6", "Figura 7", "Tableau 8", "Рис. 9",
              "Рисунок 10", "图 11", "表12", "図 13", "Figure S1"):
        assert CAPTION.match(s), s
    for s in ("Figures show that", "Table of contents", "Tableau noir", "Fig. a", "In Figure 1"):
        assert not CAPTION.match(s), s


# --- images ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pdflatex-image.pdf", "N18-3011.pdf", "epson.pdf", "multicolumn.pdf",
                                  "imagemagick-images.pdf"])
def test_image_counts_against_the_labels(name):
    images = [n for n in parsed(name)["nodes"] if n["type"] == "image"]
    label = LABELS[name]["embedded_images"]
    if name == "imagemagick-images.pdf":
        # Six 16x16 px images, each filling its 3.84-pt page: the pixel rule (< 150 px) drops them
        # all; with min_image_side=16 the area rule keeps all six, as labelled.
        assert len(images) == 0 and label == 6
        small = [n for n in parsed(name, min_image_side=16)["nodes"] if n["type"] == "image"]
        assert [(n["page"], n["width"], n["height"]) for n in small] == [(p, 16, 16) for p in range(1, 7)]
    else:
        assert len(images) == label
    for n in images:
        if LABELS[name]["no_text_layer"]:  # a scan is dropped: its images are counted, never decoded
            assert n["format"] is None and n["data"] is None
            continue
        decoded = Image.open(io.BytesIO(n["data"]))
        assert decoded.format == n["format"] and decoded.size == (n["width"], n["height"])


def test_figure_nested_in_form_xobjects_of_the_acl_paper_has_its_caption():
    (image,) = [n for n in parsed("N18-3011.pdf")["nodes"] if n["type"] == "image"]
    assert (image["page"], image["index"], image["width"], image["height"]) == (1, 0, 312, 376)
    assert image["bbox"] == pytest.approx([327.7, 408.9, 502.4, 619.4], abs=0.1)
    assert image["caption"] == "Figure 1: Part of the literature graph."
    nodes = parsed("N18-3011.pdf")["nodes"]
    at = nodes.index(image)
    caption = nodes[at + 1]                                     # the caption also stays a text node
    assert (caption["type"], caption["page"], caption["text"]) == ("text", 1, image["caption"])
    assert caption["bbox"][3] <= image["bbox"][1]               # under the figure


def test_jpeg_stream_is_passed_through_and_placed_between_paragraphs():
    (image,) = [n for n in parsed("pdflatex-image.pdf")["nodes"] if n["type"] == "image"]
    assert image["format"] == "JPEG" and image["data"][:3] == b"\xff\xd8\xff"
    assert image["data"] in pdf_bytes("pdflatex-image.pdf")     # the stream itself, not re-encoded
    kinds = [n["type"] for n in parsed("pdflatex-image.pdf")["nodes"]]
    assert kinds == ["text", "text", "image", "text", "text"]    # heading, paragraph, image, paragraph, page


def test_image_in_nested_form_xobjects_gets_its_page_box():
    # Page: a rotation (cos 0.8, sin 0.6) and a shift, then Form X4 (/Matrix 1.5x scale, shifted),
    # which draws Form X5 after a shift (X5's /Matrix squashes y by half), which draws the 200x160
    # image X6 at 150x120 units. PDFium gives the nested image's box in its form's space; the page
    # box needs every form's matrix.
    image = rgb_image(200, 160)
    inner = form(b"q 150 0 0 120 10 20 cm /Im Do Q", b"1 0 0 0.5 0 30", b"/XObject << /Im 6 0 R >>")
    outer = form(b"q 1 0 0 1 5 7 cm /Fm Do Q", b"1.5 0 0 1.5 10 0", b"/XObject << /Fm 5 0 R >>")
    # (with a line of invisible text, 3 Tr, as an OCR layer is: a page with text has its images encoded)
    data = document([b"q 0.8 0.6 -0.6 0.8 300 100 cm /X4 Do Q\nBT 3 Tr /F1 10 Tf 20 20 Td (x) Tj ET"],
                    (outer, inner, image))
    chain = (mat(150, 0, 0, 120, 10, 20) @ mat(1, 0, 0, 0.5, 0, 30) @ mat(1, 0, 0, 1, 5, 7)
             @ mat(1.5, 0, 0, 1.5, 10, 0) @ mat(0.8, 0.6, -0.6, 0.8, 300, 100))
    corners = np.array([[0, 0, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1]]) @ chain
    expected = [*corners[:, :2].min(axis=0), *corners[:, :2].max(axis=0)]

    result = parse_pdf(data)
    assert result["reason"] is None and result["pages"] == 1
    (node,) = [n for n in result["nodes"] if n["type"] == "image"]
    assert node["bbox"] == pytest.approx(expected, abs=0.01)
    assert (node["width"], node["height"], node["format"]) == (200, 160, "PNG")
    assert Image.open(io.BytesIO(node["data"])).tobytes() == gradient(200, 160)
    # ... and that box is where PDFium paints it.
    doc = pdfium.PdfDocument(data)
    page = doc[0]
    (top, left), (bottom, right) = ink(page)
    page.close()
    doc.close()
    assert [left, 792 - bottom, right, 792 - top] == pytest.approx(expected, abs=1.0)


def test_size_rules_and_raw_jpeg_in_a_form():
    jpeg = io.BytesIO()
    Image.frombytes("RGB", (300, 200), gradient(300, 200)).save(jpeg, format="JPEG", quality=90)
    jpeg = jpeg.getvalue()
    dct = stream(b"/Type /XObject /Subtype /Image /Width 300 /Height 200 /ColorSpace /DeviceRGB "
                 b"/BitsPerComponent 8 /Filter /DCTDecode", jpeg)
    in_form = form(b"q 300 0 0 200 0 0 cm /Im Do Q", b"1 0 0 1 0 0", b"/XObject << /Im 4 0 R >>")
    small = rgb_image(149, 400)
    content = (b"q 300 0 0 200 72 500 cm /X4 Do Q\n"        # kept: 300x200 px, 12% of the page
               b"q 1 0 0 1 300 100 cm /X5 Do Q\n"           # kept: the same JPEG through a form
               b"q 20 0 0 20 500 700 cm /X4 Do Q\n"         # dropped: 20x20 pt, under 1% of the page
               b"q 149 0 0 400 400 100 cm /X6 Do Q\n"       # dropped: 149 px wide, under 150
               + text(72, 480, "Figure 1: A gradient.") + text(72, 60, "Body text."))
    result = parse_pdf(document([content], (dct, in_form, small)))
    images = [n for n in result["nodes"] if n["type"] == "image"]
    assert [(n["index"], n["bbox"]) for n in images] == [(0, [72, 500, 372, 700]), (1, [300, 100, 600, 300])]
    assert all(n["format"] == "JPEG" and n["data"] == jpeg for n in images)
    assert images[0]["caption"] == "Figure 1: A gradient." and images[1]["caption"] is None
    assert len([n for n in parse_pdf(document([content], (dct, in_form, small)), min_image_side=100)["nodes"]
                if n["type"] == "image"]) == 3


def test_images_before_the_first_page_with_text_are_encoded_once_it_comes():
    # Page 1: a cover image alone; page 2: text and an image. Until page 2 the document could be a
    # scan, whose images are never decoded; page 2's text makes page 1 count, so it is parsed again.
    cover, figure = rgb_image(300, 200), rgb_image(200, 160)
    pages = [b"q 300 0 0 200 100 400 cm /X4 Do Q", b"q 200 0 0 160 100 400 cm /X5 Do Q\n" + text(72, 300, "Body.")]
    result = parse_pdf(document(pages, (cover, figure)))
    assert result["reason"] is None
    assert [(n["page"], n["type"]) for n in result["nodes"]] == [(1, "image"), (2, "image"), (2, "text")]
    for node, (w, h) in zip(result["nodes"], [(300, 200), (200, 160)]):
        assert node["format"] == "PNG" and Image.open(io.BytesIO(node["data"])).tobytes() == gradient(w, h)
    # Without the text, nothing is decoded, and both images are still counted.
    scan = parse_pdf(document([pages[0], pages[1].split(b"\n")[0]], (cover, figure)))
    assert scan["reason"] == "pdf_no_text_layer"
    assert [(n["page"], n["width"], n["data"]) for n in scan["nodes"]] == [(1, 300, None), (2, 200, None)]


def test_cmyk_bitmap_becomes_rgb_png():
    w, h = 160, 160
    cyan = zlib.compress(bytes((255, 0, 0, 0)) * (w * h))
    image = stream(b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceCMYK "
                   b"/BitsPerComponent 8 /Filter /FlateDecode" % (w, h), cyan)
    (node, _) = parse_pdf(document([b"q 160 0 0 160 100 100 cm /X4 Do Q\n" + text(100, 50, "Cyan.")], (image,)))["nodes"]
    decoded = Image.open(io.BytesIO(node["data"]))
    assert (node["format"], decoded.mode) == ("PNG", "RGB")
    r, g, b = decoded.getpixel((80, 80))
    assert r < 60 and g > 120 and b > 180            # cyan


def test_page_sized_image_under_text_goes_first_and_the_text_keeps_its_columns():
    # A scan with an OCR layer: one image under the whole page, two columns of text on it.
    scan = rgb_image(612, 792)
    left = text(72, 700, "left one") + text(72, 688, "left two")
    right = text(320, 700, "right one") + text(320, 688, "right two")
    result = parse_pdf(document([b"q 612 0 0 792 0 0 cm /X4 Do Q\n" + right + left], (scan,)))
    assert [n.get("text", n["type"]) for n in result["nodes"]] == [
        "image", "left one left two", "right one right two"]


# --- failures --------------------------------------------------------------------------------------

def test_encrypted_broken_truncated_and_not_a_pdf():
    encrypted = parse_pdf(pdf_bytes("libreoffice-writer-password.pdf"))
    assert encrypted == {"reason": "pdf_encrypted", "detail": encrypted["detail"], "pages": 0, "nodes": []}
    assert "password" in encrypted["detail"]
    for data in (pdf_bytes("invalid.pdf"), b"", b"<html>not a pdf</html>", b"%PDF-1.4\n" + bytes(range(256))):
        broken = parse_pdf(data)
        assert (broken["reason"], broken["nodes"]) == ("pdf_broken", []) and broken["detail"]
    # PDFium's xref reconstruction does not recover a PDF cut in half (object and xref streams of
    # pdfTeX): broken, not a partial parse.
    paper = pdf_bytes("N18-3011.pdf")
    truncated = parse_pdf(paper[:len(paper) // 2])
    assert truncated["reason"] == "pdf_broken" and "Data format error" in truncated["detail"]


def test_scanned_and_offpage_text_have_no_text_layer():
    scan = parsed("epson.pdf")
    assert (scan["reason"], scan["pages"]) == ("pdf_no_text_layer", 1)
    (image,) = scan["nodes"]
    assert (image["type"], image["format"], image["data"], image["width"], image["height"]) == (
        "image", None, None, 2480, 3507)
    # Its CCITT fax image decodes (were the page to count) to a grey PNG of its pixel size.
    doc = pdfium.PdfDocument(pdf_bytes("epson.pdf"))
    page = doc[0]
    (encoded,), has_text = _parse_page(page, 1, 150, _Skipped())
    page.close()
    doc.close()
    decoded = Image.open(io.BytesIO(encoded["data"]))
    assert (has_text, encoded["format"], decoded.mode, decoded.size) == (False, "PNG", "L", (2480, 3507))
    assert LABELS["epson.pdf"]["scanned_only"] and LABELS["epson.pdf"]["no_text_layer"]
    # ImageMagick's "Background" text lies outside its 3.84-pt pages: not shown, not a text layer.
    tiny = parsed("imagemagick-images.pdf")
    assert (tiny["reason"], tiny["pages"], tiny["nodes"]) == ("pdf_no_text_layer", 6, [])


def test_max_pages():
    data = document([text(72, 700, f"page {k}") for k in range(1, 4)])
    assert parse_pdf(data, max_pages=2) == {"reason": "pdf_too_many_pages", "detail": "3 pages > 2",
                                            "pages": 3, "nodes": []}
    result = parse_pdf(data, max_pages=3)
    assert result["reason"] is None
    assert [(n["page"], n["text"]) for n in result["nodes"]] == [(1, "page 1"), (2, "page 2"), (3, "page 3")]


def plain(value) -> bool:
    """Only str, int, float, bytes, None, and lists and dicts of them (str keys)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return isinstance(value, (str, int, float, bytes, type(None)))


def test_deterministic_and_picklable():
    for name in ("N18-3011.pdf", "pdflatex-image.pdf"):           # PNG-encoded and raw JPEG images
        first, again = parse_pdf(pdf_bytes(name)), parse_pdf(pdf_bytes(name))
        assert first == again
        assert plain(first) and pickle.loads(pickle.dumps(first)) == first
