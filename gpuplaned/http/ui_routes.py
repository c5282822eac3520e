"""The web UI on the HTTP front: the built app's files, and ``/login`` for login links.

Registered on the HTTP front only (the control socket has no browser). None of these routes
needs credentials (``gpuplaned.http.scopes.UI_RULES``): the page holds no data, and all it
shows comes from ``/api/``, which does.

- ``GET /assets/<path>``: the build's hashed files, cached for a year (``immutable``).
- ``GET /``, and any other GET outside ``/api/``, ``/assets/`` and ``/login`` that accepts
  ``text/html`` (the app's own routes: ``/jobs/job_123``, ``/runs/run_1?tab=metrics``):
  ``index.html``, ``no-cache``. A file the build holds at that path (``/favicon.ico``) is
  served as itself. When no build is found: 503 with a short page saying how to build it.
- ``GET /login?code=CODE``: trades a login link's code (``gpuplanectl ui``) for the session
  cookie and answers 303 to where the link said (``/`` by default), so the code leaves the
  address bar; a used, unknown or expired code gets a short 401 page. HEAD uses nothing up.

Where the build is: ``[ui] web_dir`` / ``GPUPLANE_WEB_DIR`` when set; else ``gpuplaned/_web``
(where a package may install it); else ``web/dist`` of the source checkout. It is looked up
on each request, so ``make web`` while the daemon runs takes effect at the next page load.
Every file is resolved inside that folder, and nothing outside it (``..``, a symlink out,
a dot-file) is ever served.
"""

from __future__ import annotations

import html
import logging
import mimetypes
from pathlib import Path
from typing import TYPE_CHECKING

from quart import Response, redirect, request
from quart.helpers import send_file
from quart_trio import QuartTrio
from werkzeug.routing import PathConverter
from werkzeug.security import safe_join

import gpuplaned
from gpuplaned.http.auth_routes import set_session_cookie
from gpuplaned.http.scopes import UI_RULES
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api import ui_sessions

if TYPE_CHECKING:
    from gpuplaned.config import Config
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.ui")

ASSET_CACHE = "public, max-age=31536000, immutable"
PAGE_CACHE = "no-cache"
# The UI's pages: never framed (clickjacking), no <base> or plugins, no Referer leaving.
PAGE_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'none'; base-uri 'self'; object-src 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# The daemon's own little pages hold no script at all.
NOTE_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_TYPES = {
    ".html": "text/html", ".js": "text/javascript",
    ".mjs": "text/javascript", ".css": "text/css", ".json": "application/json",
    ".map": "application/json", ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
    ".woff2": "font/woff2", ".woff": "font/woff", ".wasm": "application/wasm", ".txt": "text/plain",
}
_CHECKOUT_BUILD = Path(gpuplaned.__file__).resolve().parent.parent / "web" / "dist"
_PACKAGED_BUILD = Path(gpuplaned.__file__).resolve().parent / "_web"


class UiPathConverter(PathConverter):
    """A path for the app's own routes: anything but ``api``, ``assets`` and ``login`` (and
    below them), so unknown API paths stay JSON 404s and never become the page."""

    regex = r"(?!(?:api|assets|login)(?:/|$))[^/].*?"


def web_dir(cfg: Config) -> Path:
    """The folder the built app is served from (it may not exist: then nothing is built)."""
    if cfg.ui.web_dir is not None:
        return cfg.ui.web_dir
    if (_PACKAGED_BUILD / "index.html").is_file():
        return _PACKAGED_BUILD
    return _CHECKOUT_BUILD


def resolve(root: Path, relative: str) -> Path | None:
    """The regular file ``relative`` names inside ``root``; None for anything else: missing,
    a folder, a dot-file, or a path that leaves ``root`` (``..``, absolute, a symlink out)."""
    if not relative or "\x00" in relative or any(part.startswith(".") for part in relative.split("/")):
        return None
    joined = safe_join(str(root), relative)
    if joined is None:
        return None
    try:
        real = Path(joined).resolve(strict=True)
        inside = real.is_relative_to(root.resolve(strict=True))
    except (OSError, RuntimeError, ValueError):
        return None
    return real if inside and real.is_file() else None


def _note(status: int, title: str, text: str) -> Response:
    """One of the daemon's own short HTML pages."""
    page = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>GPUPlane: {html.escape(title)}"
            "</title><meta name=\"viewport\" content=\"width=device-width\"></head><body style=\"font:16px/1.5 "
            "system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em\">"
            f"<h1 style=\"font-size:1.4em\">{html.escape(title)}</h1>{text}</body></html>\n")
    response = Response(page, status=status, content_type="text/html; charset=utf-8")
    response.headers.update(PAGE_HEADERS)
    response.headers["Content-Security-Policy"] = NOTE_CSP
    response.headers["Cache-Control"] = "no-store"
    return response


def not_built() -> Response:
    return _note(503, "The web UI is not built",
                 "<p>This gpuplaned has no build of its web UI to serve. In the GPUPlane source checkout, "
                 "build it with <code>make web</code> (it needs Node.js and npm), then reload this page; "
                 "<code>make run</code> builds it too when npm is there.</p>"
                 "<p>A build elsewhere can be named with <code>GPUPLANE_WEB_DIR</code> or "
                 "<code>web_dir</code> in the <code>[ui]</code> section of the config. The API under "
                 "<code>/api/v1</code> works either way.</p>")


def _link_spent() -> Response:
    return _note(401, "This login link is used or expired",
                 "<p>A login link works once, for a short while. Run <code>gpuplanectl ui</code> again on the "
                 "daemon's machine for a new one, or sign in with an API token.</p>")


def _accepts_html() -> bool:
    return any(value in ("text/html", "application/xhtml+xml") and quality > 0
               for value, quality in request.accept_mimetypes)


async def _file(path: Path, cache: str) -> Response:
    content_type = _TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    response = await send_file(path, mimetype=content_type, conditional=True)
    response.headers["Cache-Control"] = cache
    response.headers.pop("Expires", None)
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def register(app: QuartTrio, shared: ServerContext) -> None:
    app.url_map.converters["ui_path"] = UiPathConverter
    index_rule, login_rule, assets_rule, fallback_rule = UI_RULES
    warned: set[Path] = set()

    async def index() -> Response:
        root = web_dir(shared.config)
        found = resolve(root, "index.html")
        if found is None:
            if root not in warned:
                warned.add(root)
                log.warning("no web UI build in %s (index.html): the HTTP front answers / with a 'not built' page; "
                            "`make web` builds it", root)
            return not_built()
        response = await _file(found, PAGE_CACHE)
        response.headers.update(PAGE_HEADERS)
        return response

    @app.get(index_rule)
    async def ui_index() -> Response:
        return await index()

    @app.get(assets_rule)
    async def ui_asset(name: str) -> Response:
        found = resolve(web_dir(shared.config) / "assets", name)
        if found is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no such file in the web UI's build: /assets/{name}")
        return await _file(found, ASSET_CACHE)

    @app.get(fallback_rule)
    async def ui_route(path: str) -> Response:
        found = resolve(web_dir(shared.config), path)
        if found is not None:
            response = await _file(found, PAGE_CACHE)
            if found.suffix.lower() in (".html", ".htm"):
                response.headers.update(PAGE_HEADERS)
            return response
        if not _accepts_html():
            raise ApiError(ErrorCode.NOT_FOUND, f"no such endpoint: GET /{path}")
        return await index()

    @app.get(login_rule)
    async def ui_login() -> Response:
        code = request.args.get("code")
        if request.method == "HEAD":
            # A link checker or preview asking about the link must not use it up.
            response = Response("", status=200, content_type="text/html; charset=utf-8")
        elif code is None:
            response = redirect("/", 303)
        else:
            redeemed = await ui_sessions.redeem_login_code(shared, code)
            if redeemed is None:
                return _link_spent()
            session, cookie, next_path = redeemed
            response = redirect(ui_sessions.check_next(next_path), 303)
            assert session.expires_at is not None
            set_session_cookie(response, cookie, session.expires_at, shared.wall_ms())
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response
