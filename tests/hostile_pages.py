"""Pages a hostile or careless crawl holds, built at test time (tests/test_hostile_pages.py, the fuzz
seeds, benchmarks/hostile_pages.py): long galleries, pages of bare images, figures nested without end
tags, huge tables. `scale` multiplies the size of each; scale 1 is the size a real crawl was seen to hold.
"""

from __future__ import annotations


def gallery(pairs: int) -> str:
    """`pairs` paragraphs, each followed by an image with an alt text (a long photo gallery)."""
    body = "".join(f"<p>Photo {i} of the gallery, taken on the second day of the trip.</p>"
                   f"<img src='/gallery/{i}.jpg' alt='The harbour seen from the north pier, photo {i}'>"
                   for i in range(pairs))
    return f"<!doctype html><html><head><title>Gallery</title></head><body>{body}</body></html>"


def bare_images(count: int) -> str:
    """`count` images without alt, side by side."""
    return "<html><body>" + "".join(f"<img src='/thumbs/{i}.png'>" for i in range(count)) + "</body></html>"


def nested_figures(depth: int) -> str:
    """`depth` figures, each in a div and each in the previous one's unclosed caption."""
    figure = "<div><figure><img src='/figures/f.jpg' alt='A nested figure of the page'><figcaption>Caption"
    return "<html><body>" + figure * depth + "</body></html>"


def wide_table(rows: int, columns: int) -> str:
    """One image, then a table of `rows` x `columns` cells."""
    row = "<tr>" + "<td>cell</td>" * columns + "</tr>"
    return ("<html><body><img src='/table.jpg' alt='The chart the table below lists'><table>" + row * rows
            + "</table></body></html>")


def pages(scale: int = 1) -> dict[str, str]:
    """The four pages of a crawl that once failed a run, `scale` times larger."""
    return {"gallery_5k": gallery(5_000 * scale), "gallery_50k": gallery(50_000 * scale),
            "bare_images_100k": bare_images(100_000 * scale), "nested_figures_20k": nested_figures(20_000 * scale),
            "table_20k_rows": wide_table(20_000 * scale, 50)}
