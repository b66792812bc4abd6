"""HTML built so that nothing can be unescaped by mistake.

Every piece of markup is an :class:`Html` value, and only this module makes them: :func:`tag`
escapes every text child and every attribute value that is not already :class:`Html`, and
:func:`raw` is used for the few constant fragments of our own. So a record's key, a header, a
group id or an error message — any ``str`` — always reaches the page as text, never as markup:
``<script>`` arrives as ``&lt;script&gt;`` and ``"><img onerror=...>`` cannot leave an attribute.
The page's Content-Security-Policy (server.py) forbids inline script as a second wall.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
#: Attributes that take a URL: only our own (relative) URLs are allowed in them.
_URL_ATTRS = frozenset({"href", "src", "action", "formaction"})


class Html(str):
    """Markup that is safe to put in a page as it is (made only by this module)."""

    __slots__ = ()


def esc(value: object) -> Html:
    """``value`` as text: ``Html`` passes through, anything else is converted and escaped (quotes too)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def raw(markup: str) -> Html:
    """A constant fragment of our own markup (never data)."""
    return Html(markup)


def join(parts: Iterable[object], sep: str = "") -> Html:
    return Html(esc(sep).join(esc(p) for p in parts))


def _attr(name: str, value: object) -> str:
    if not _NAME.match(name) or name.startswith("on"):  # no event handlers, ever
        raise ValueError(f"attribute name {name!r} is not allowed")
    if value is True:
        return f" {name}"
    text = str(value)
    own = text.startswith(("?", "#")) or (text.startswith("/") and not text.startswith("//"))
    if name in _URL_ATTRS and not own:
        raise ValueError(f"{name}={text!r}: only the console's own relative URLs are allowed")
    return f' {name}="{esc(value)}"'


def tag(name: str, /, *children: object, **attrs: object) -> Html:
    """``<name attrs>children</name>``; ``class_`` for ``class``, ``data_x`` for ``data-x``;
    attributes that are ``None`` or ``False`` are left out."""
    if not _NAME.match(name) or name in ("script", "style", "iframe", "object", "embed"):
        raise ValueError(f"element {name!r} is not allowed")
    parts = "".join(_attr(k.rstrip("_").replace("_", "-"), v) for k, v in attrs.items()
                    if v is not None and v is not False)
    if name in ("br", "hr", "input", "meta", "link", "img"):
        return Html(f"<{name}{parts}>")
    return Html(f"<{name}{parts}>{''.join(esc(c) for c in _flat(children))}</{name}>")


def _flat(children: Iterable[object]) -> Iterable[object]:
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, (list, tuple)):
            yield from _flat(child)
        else:
            yield child
