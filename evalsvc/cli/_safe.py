"""Untrusted text (model ids, endpoint names and URLs, errors, reasons) for the rich console.

Contract: ``term(value)`` is ``value`` as a string that rich prints literally: control
characters written as visible escapes (``evalsvc.textsafe``), then rich's markup escaped, so
``[/]`` in a model id is shown as ``[/]`` instead of raising ``MarkupError`` and ``[red]`` in a
candidate name cannot restyle a verdict. Every endpoint-, model- or submitter-provided string
printed through rich (``Console.print``, table cells, progress descriptions) goes through it;
text that is echoed as plain text (``typer.echo``) goes through ``plain``.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from evalsvc.textsafe import visible_controls


def plain(value: Any) -> str:
    """``value`` with control characters made visible (for ``typer.echo`` and JSON-less text)."""
    return visible_controls(str(value), keep_newlines=True)


def term(value: Any) -> str:
    """``value`` safe to embed in rich markup: controls made visible, markup escaped."""
    return escape(plain(value))
