"""MkDocs hooks for the notebook pages (mkdocs.yml: `hooks:`).

mkdocs-jupyter renders a notebook's headings with ids made from their whole
text, code included, but builds the page's table of contents from the text
without its code: the entries of a heading with code (`The data and the
`model_fn`...`) lost words and linked to anchors no heading has (`#_1`). And
links between notebooks (`02_....ipynb`) point to files the site does not
have. And nbconvert gives plots the alt text "No description has been
provided for this image". All three are mended here; the link check of the
built site (`htmlproofer` in mkdocs.yml) keeps the links mended.
"""

from __future__ import annotations

import html
import re
from typing import Any

_HEADING = re.compile(r"<h([1-6])[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</h\1>", re.S)
_NOTEBOOK_LINK = re.compile(r"href=\"(\d\d_[A-Za-z0-9_]+)\.ipynb(#[^\"]*)?\"")
_NO_ALT = 'alt="No description has been provided for this image"'
_HEADING_OR_IMAGE = re.compile(r"<h([1-6])[^>]*>(.*?)</h\1>|" + re.escape(_NO_ALT), re.S)


def _text(inner: str) -> str:
    inner = re.sub(r"<a class=\"anchor-link\".*?</a>", "", inner, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", inner)).strip()


def _flatten(items: Any) -> list[Any]:
    found = []
    for item in items:
        found.append(item)
        found += _flatten(item.children)
    return found


def on_page_content(content: str, page: Any, **kwargs: Any) -> str:
    if not page.file.src_path.endswith(".ipynb"):
        return content
    headings = [(anchor, _text(inner)) for _, anchor, inner in _HEADING.findall(content)]
    entries = _flatten(page.toc)
    if len(entries) == len(headings):  # the same headings, in the same order
        for entry, (anchor, text) in zip(entries, headings, strict=True):
            entry.id, entry.title = anchor, text
    content = _NOTEBOOK_LINK.sub(lambda m: f'href="../{m.group(1)}/{m.group(2) or ""}"', content)
    section = [page.title]

    def alt(match: re.Match[str]) -> str:
        if match.group(1):  # a heading: plots below it are described by it
            section[0] = _text(match.group(2))
            return match.group(0)
        return f'alt="Plot of the cell above, in the section: {html.escape(section[0])}"'

    return _HEADING_OR_IMAGE.sub(alt, content)
