"""The FinOps web page at ``/ui``: static files only, served as they are.

The page (``static/``: one HTML file, vanilla JavaScript, a stylesheet, and
a small SVG chart module; no build step, no Node at run time) logs in with an
admin token that the browser keeps for the tab, and reads every number from
the admin and usage APIs (``/admin/v1/...``) with that token. So these routes
are open (``is_ui_path``), hold nothing secret, and serve only the files
listed in ``FILES``; the content security policy allows scripts from this
origin alone.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC = Path(__file__).with_name("static")
PREFIX = "/ui"
FILES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "charts.js": "text/javascript",
    "change.js": "text/javascript",
    "tables.js": "text/javascript",
    "app.css": "text/css",
}
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def is_ui_path(path: str) -> bool:
    """``/ui`` and what is under it: open routes (static files; the data needs an admin token)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def _file(name: str) -> web.Response:
    kind = FILES.get(name)
    if kind is None:
        raise web.HTTPNotFound()
    return web.Response(body=(STATIC / name).read_bytes(), content_type=kind, charset="utf-8", headers=HEADERS)


async def page(request: web.Request) -> web.Response:
    return _file("index.html")


async def asset(request: web.Request) -> web.Response:
    return _file(request.match_info["name"])


async def to_page(request: web.Request) -> web.Response:
    return web.Response(status=302, headers={"Location": PREFIX + "/"})


def add_routes(app: web.Application) -> None:
    app.router.add_get(PREFIX, to_page)
    app.router.add_get(PREFIX + "/", page)
    app.router.add_get(PREFIX + "/{name}", asset)
