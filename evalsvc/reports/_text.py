"""Endpoint-provided text made inert for the report formats (Markdown and XML).

Contract: ``md_text`` gives one line of Markdown with HTML entities and Markdown punctuation
escaped and no bare autolinks; ``xml_text`` drops what XML 1.0 cannot carry. Both the renderers
(``_render``) and the findings (``_findings``) use them; this module imports neither.
"""

from __future__ import annotations

import html
import re
from typing import Any

from evalsvc.textsafe import visible_controls

# Markdown punctuation that can start markup inline (CommonMark "backslash escapes"); "<", ">"
# and "&" become HTML entities first, so no raw HTML survives.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~])")
# XML 1.0 Char production: tab, LF, CR and U+0020 upwards, minus surrogates and U+FFFE/FFFF.
_XML_INVALID = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def md_text(value: Any) -> str:
    """``value`` as inert Markdown text on one line (for endpoint-provided strings)."""
    # ESC and the other controls are written as visible escapes: a report.md shown with `cat`
    # or in a terminal pager must not clear the screen or fake a verdict (evalsvc.textsafe).
    text = visible_controls(" ".join(str(value).split()))
    text = html.escape(text, quote=False)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text.replace("://", "\\://")  # no bare autolinks either


def xml_text(value: Any) -> str:
    """``value`` without the characters XML 1.0 cannot represent (ElementTree escapes the rest)."""
    return _XML_INVALID.sub("\ufffd", str(value))
