"""The browser console's files, as ``dormant dev`` serves them.

The console is a single page built from ``console/`` in the repository (``npm run build``) into
``dormant/_web/``, which the wheel carries: users of ``pip install dormant`` get it without
Node.js. It talks to the server only through the public HTTP API (``/sessions``, ``/turns``,
``/agui``), so it needs nothing here but its files.

``GET /`` is the console for a browser (a request that accepts ``text/html``) and the OpenAPI
description for everything else, as it always was; ``/assets/<file>`` are its scripts and
styles. None of this is on the Lambda path: the ``api`` function never imports this module,
and the layer's build leaves ``_web/`` out.

The console sends a guest's messages to ``POST /agui``, which needs the AG-UI protocol package
(``ag_ui``, part of the ``aws`` extra). An installation without it still serves the page, but
the page's ``<head>`` then carries ``<meta name="dormant-missing" content="...">`` (see
:func:`missing`), so the page can say so and use ``POST /turns`` instead. An installation
that has it says what the page may count on instead, ``<meta name="dormant-capabilities"
content="agui-controls">`` (:data:`CAPABILITIES`): the page sends its controls (a retry, a
resume, "send now") over ``POST /agui`` because it was told it can, never probing for it.
"""

from __future__ import annotations

import html
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CAPABILITIES", "WEB_DIR", "StaticReply", "console_file", "missing"]

#: Where the built console lives inside the package.
WEB_DIR = Path(__file__).with_name("_web")

_ASSET = re.compile(r"/assets/([A-Za-z0-9][A-Za-z0-9._-]{0,127})")
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".woff2": "font/woff2",
}
#: The page loads its own scripts and styles and talks to its own origin, nothing else.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; "
                           "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                           "form-action 'self'; frame-ancestors 'none'")
_MISSING = ("<!doctype html><title>dormant console</title><p>This installation of dormant has "
            "no console files (<code>dormant/_web/</code>). From a checkout, build them with "
            "<code>npm ci --prefix console &amp;&amp; npm run --prefix console build</code>. "
            "The API is described at <a href=\"/docs\">/docs</a>.</p>")
_HEAD = re.compile(rb"<head[^>]*>", re.IGNORECASE)
#: What a page without ``POST /agui`` is told, and the start-up line says.
AGUI_MISSING = ("POST /agui (the console's streaming route) needs the AG-UI protocol package, "
                "which is not installed: pip install 'dormant[aws]' (or 'ag-ui-protocol>=1.0,<2')")
#: What the page served with ``POST /agui`` may count on, space-separated: ``agui-controls``,
#: the fields of a ``POST /turns`` body (retry, resume, queue, inputs) run when sent in
#: ``forwardedProps.dormant`` of ``POST /agui``. A page not told (one served by another
#: server, e.g. Vite's) sends those through ``POST /turns``.
CAPABILITIES = "agui-controls"


def missing() -> str | None:
    """One sentence on what this installation lacks for the console, or None: nothing.

    Looked up, not imported: ``dormant dev`` asks once at start-up, before any request."""
    return AGUI_MISSING if importlib.util.find_spec("ag_ui") is None else None


@dataclass(frozen=True)
class StaticReply:
    """One static answer: status, headers and body."""

    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def console_file(method: str, path: str, accept: str, *, web_dir: Path = WEB_DIR,
                 lacking: str | None = None) -> StaticReply | None:
    """The console's answer to ``method path`` (the path without its query), or None when
    the request is not the console's (the API answers it). ``lacking``: what :func:`missing`
    said, put into the page's ``<head>`` as ``<meta name="dormant-missing">``; without it the
    head says :data:`CAPABILITIES` (``<meta name="dormant-capabilities">``)."""
    if method not in ("GET", "HEAD"):
        return None
    if path in ("/", "/index.html"):
        if path == "/" and "text/html" not in accept:
            return None  # an API client asking for the OpenAPI description
        index = web_dir / "index.html"
        if not index.is_file():
            return StaticReply(503, "text/html; charset=utf-8", _MISSING.encode(),
                               {"Cache-Control": "no-store"})
        page = index.read_bytes()
        page = _with_meta(page, "dormant-missing", lacking) if lacking \
            else _with_meta(page, "dormant-capabilities", CAPABILITIES)
        return StaticReply(200, "text/html; charset=utf-8", page, {
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        })
    match = _ASSET.fullmatch(path)
    if match is None or ".." in match.group(1):
        return None
    asset = web_dir / "assets" / match.group(1)
    content_type = _TYPES.get(asset.suffix)
    if content_type is None or not asset.is_file():
        return None
    # Built file names carry a hash of their content: a name never changes meaning.
    return StaticReply(200, content_type, asset.read_bytes(), {
        "Cache-Control": "public, max-age=31536000, immutable",
        "X-Content-Type-Options": "nosniff",
    })


def _with_meta(page: bytes, name: str, content: str) -> bytes:
    """``page`` with ``<meta name=name content=content>`` first in its head (a ``<meta>`` is
    no script or style: the Content-Security-Policy stays as it is)."""
    meta = f'<meta name="{name}" content="{html.escape(content)}">'.encode()
    head = _HEAD.search(page)
    if head is None:
        return meta + page
    return page[:head.end()] + meta + page[head.end():]
