"""Text from endpoints, models and submitters made inert for terminals and text formats.

Contract (stdlib only, no I/O, importable from any layer): model ids, endpoint names, errors and
outputs are untrusted text. ``visible_controls(text)`` writes every control character as a
visible escape (``\\x1b``, ``\\x9b``, ``\\u202e``) so that nothing reaching a terminal or a text
report can move the cursor, clear the screen, recolour text (ANSI/VT escape sequences start
with ESC or the C1 CSI), or reorder what is shown (Unicode bidirectional overrides, the
"Trojan Source" characters, CVE-2021-42574). ``csv_cell(value)`` defuses spreadsheet formulas.
The rich console's own markup is escaped where it is printed (``evalsvc.cli._safe``).
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls (tab and newline included: callers print one field per line or cell), DEL, C1
# controls, and the bidirectional embedding/override/isolate characters of Unicode (UAX #9).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")

# Cells a spreadsheet reads as a formula (OWASP "CSV Injection": = + - @, and tab and carriage
# return, which some spreadsheets strip before looking at the first character).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(m: re.Match[str]) -> str:
    code = ord(m[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character written as a visible escape. ``keep_newlines``
    keeps ``\\n`` (multi-line messages); everything else, ``\\r`` included, is escaped."""
    if keep_newlines:
        return "\n".join(_CONTROLS.sub(_escape, line) for line in text.split("\n"))
    return _CONTROLS.sub(_escape, text)


def csv_cell(value: Any) -> Any:
    """A CSV cell that a spreadsheet shows as text: a string starting with ``= + - @``, tab or
    carriage return gets a leading apostrophe (OWASP's guidance; the apostrophe is not shown).
    Numbers and other non-strings are returned unchanged (a negative number is not a formula)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
