"""Endpoint-provided text made inert for the report formats (Markdown and XML).

Contract: ``md_text`` gives one line of Markdown that renders as the text it was given: what
could start HTML, an entity, emphasis, code, a link, a table cell or strikethrough escaped, and
nothing else (``q8_0``, ``a < b`` stay readable in the file), URLs as code spans (never links);
``md_code`` one inline code span; ``xml_text`` drops what XML 1.0 cannot carry. Both the renderers
(``_render``) and the findings (``_findings``) use them; this module imports neither.
"""

from __future__ import annotations

import re
from typing import Any

from evalsvc.textsafe import visible_controls

# What can start markup inline anywhere in a line (CommonMark "backslash escapes"): code,
# emphasis, links and images, tables' cell separators, strikethrough, the escape itself. Other
# punctuation ("#", "+", "-", ">" at a line start; "(" after "]"; "!" before "[") cannot,
# since ``md_text`` writes one line placed after evalsvc's own prefix, and "[" is escaped.
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~])")
# "_" emphasizes only at a word's edge (CommonMark: intraword "_" is literal): q8_0 stays.
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# Raw HTML starts with "<" and a letter, "/", "!" or "?"; an entity with "&" and a name or
# "#". Only those are written as entities: "Δ < margin" and "A & B" stay as they are.
_HTML_START = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY_START = re.compile(r"&(?=#|[A-Za-z][A-Za-z0-9]*;)")
# A URL: shown as a code span (literal, never a link, not even a GitHub autolink) instead of
# "http\://"; one holding "|" or "`" is escaped as text (a code span cannot hold a table's "|").
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s|`]*[^\s|`.,;:!?)\]'\"]")
# XML 1.0 Char production: tab, LF, CR and U+0020 upwards, minus surrogates and U+FFFE/FFFF.
_XML_INVALID = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def md_code(value: Any) -> str:
    """``value`` as an inline code span on one line: shown literally (no markup, no HTML, no
    link), fenced by more backticks than it holds."""
    text = visible_controls(" ".join(str(value).split()))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_prose(text: str) -> str:
    text = _ENTITY_START.sub("&amp;", text)
    text = _HTML_START.sub("&lt;", text)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _EDGE_UNDERSCORE.sub(r"\\_", text)


def md_text(value: Any) -> str:
    """``value`` as inert Markdown text on one line (for endpoint-provided strings), escaped
    only where it could form markup, so it reads clean in the file and rendered: ``q8_0`` and
    ``a < b`` as they are, URLs as code spans, ``<tag>`` and ``*x*`` inert."""
    # ESC and the other controls are written as visible escapes: a report.md shown with `cat`
    # or in a terminal pager must not clear the screen or fake a verdict (evalsvc.textsafe).
    text = visible_controls(" ".join(str(value).split()))
    out: list[str] = []
    last = 0
    for m in _URL.finditer(text):
        out.append(_md_prose(text[last:m.start()]))
        out.append(md_code(m.group()))
        last = m.end()
    out.append(_md_prose(text[last:]))
    return "".join(out)


def xml_text(value: Any) -> str:
    """``value`` without the characters XML 1.0 cannot represent (ElementTree escapes the rest)."""
    return _XML_INVALID.sub("\ufffd", str(value))
