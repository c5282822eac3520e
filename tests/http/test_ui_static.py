"""The web UI's files on the HTTP front: a real daemon serving a small fake build from
GPUPLANE_WEB_DIR, over real TCP."""

from __future__ import annotations

import http.client
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import DaemonProcess, kill_processes_with_env

from gpuplaned.http.ui_routes import resolve
from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e

INDEX = "<!doctype html><html><head><script type=module src=/assets/app-1a2b3c.js></script></head>" \
        "<body><div id=root></div></body></html>\n"
APP_JS = "console.log('gpuplane');\n"
SECRET = "TOP-SECRET-OUTSIDE-THE-BUILD"
HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def make_build(root: Path) -> Path:
    """``root/dist``: index.html, assets/app-1a2b3c.js, favicon.ico; beside it, things that must
    never be served: a secret file, a symlink out of the build, dot-files."""
    dist = root / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text(INDEX)
    (dist / "assets" / "app-1a2b3c.js").write_text(APP_JS)
    (dist / "favicon.ico").write_bytes(b"\x00\x00\x01\x00")
    (root / "secret.txt").write_text(SECRET)
    (dist / "assets" / "link-out.js").symlink_to(root / "secret.txt")
    (dist / "linked-dir").symlink_to(root)
    (dist / ".env").write_text(SECRET)
    (dist / "assets" / ".hidden.js").write_text(SECRET)
    return dist


class Front:
    def __init__(self, daemon) -> None:
        self.daemon = daemon
        url = daemon.client().get("/api/v1/daemon")["endpoints"]["http"]
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET",
            ) -> tuple[int, dict[str, str], bytes]:
        """One raw request: ``path`` goes on the wire exactly as given."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            conn.endheaders()
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def token(self) -> str:
        return self.daemon.client().post("/api/v1/tokens", {"name": "t", "scopes": ["read"]})["secret"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Front:
    """One daemon serving one build for the module: the tests only read it (one makes a token of
    its own), so none needs a fresh daemon, whose start was most of such a test's time."""
    root = tmp_path_factory.mktemp("ui-static")
    dist = make_build(root / "web")
    daemon = DaemonProcess(root / "d", "--gpus=fake:1", env={"GPUPLANE_WEB_DIR": str(dist)}).start()
    try:
        daemon.wait_ready()
        yield Front(daemon)
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def test_the_app_is_served_without_credentials(built):
    status, headers, body = built.get("/", HTML)
    assert (status, body.decode()) == (200, INDEX)
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["cache-control"] == "no-cache"
    assert headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"

    status, headers, body = built.get("/assets/app-1a2b3c.js")
    assert (status, body.decode()) == (200, APP_JS)
    assert headers["content-type"].startswith("text/javascript")
    assert headers["cache-control"] == "public, max-age=31536000, immutable"

    status, headers, body = built.get("/favicon.ico", {"Accept": "image/*"})
    assert status == 200 and body == b"\x00\x00\x01\x00" and headers["cache-control"] == "no-cache"

    status, headers, body = built.get("/", HTML, method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) == len(INDEX)


def test_conditional_requests_revalidate(built):
    _, headers, _ = built.get("/", HTML)
    status, _, body = built.get("/", {**HTML, "If-None-Match": headers["etag"]})
    assert (status, body) == (304, b"")


def test_client_routes_get_the_app(built):
    for path in ("/jobs/job_123", "/runs/run_1?tab=metrics", "/nodes/gpu-box-1/gpus/0", "/apix", "/loginx",
                 "/v/Ab3_x-9zQk1", "/experiments?sel=p:vision&smooth=0.6",  # a short link, the workspace
                 "/assets-old/x", "/jobs/%2e%2e/x"):
        status, headers, body = built.get(path, HTML)
        assert (status, body.decode()) == (200, INDEX), path
        assert headers["cache-control"] == "no-cache" and headers["x-frame-options"] == "DENY"


def test_what_is_not_the_app_is_not_turned_into_it(built):
    # A client route asked for as data, a missing asset: JSON 404s, never the page.
    for path, headers in (("/jobs/job_123", {"Accept": "application/json"}), ("/jobs/job_123", {}),
                          ("/assets/missing.js", HTML)):
        status, got, body = built.get(path, headers)
        assert status == 404 and got["content-type"] == "application/json", (path, status, body)
        assert b'"not_found"' in body
    # Every /api/ path still needs credentials, known or not, whatever it accepts; so does any
    # path no route serves.
    for method, path in (("GET", "/api/v1/jobs"), ("GET", "/api/v1/nope"), ("GET", "/api"), ("GET", "/api/"),
                         ("POST", "/api/v1/nope"), ("GET", "/api/v1/auth/session"), ("GET", "/assets/"),
                         ("GET", "/login/x")):
        status, _, body = built.get(path, HTML, method=method)
        assert status == 401 and b'"unauthorized"' in body, (method, path, status)
    token = {"Authorization": f"Bearer {built.token()}"}
    status, got, _ = built.get("/api/v1/nope", {**HTML, **token})
    assert status == 404 and got["content-type"] == "application/json"
    assert built.get("/api/v1/jobs", {**HTML, **token})[0] == 200
    # Only GET (and HEAD) serve the app.
    assert built.get("/jobs/job_1", HTML, method="POST")[0] == 401
    # /login is the server's: without a code it sends the browser to the app.
    status, got, _ = built.get("/login", HTML)
    assert status == 303 and got["location"] == "/"


TRAVERSALS = [
    "/assets/../../secret.txt", "/assets/%2e%2e/%2e%2e/secret.txt", "/assets/..%2f..%2fsecret.txt",
    "/assets/%2E%2E%2F%2E%2E%2Fsecret.txt", "/%2e%2e/secret.txt", "/..%2fsecret.txt", "/../secret.txt",
    "/assets/link-out.js", "/linked-dir/secret.txt", "/.env", "/assets/.hidden.js", "/assets/%2fetc%2fpasswd",
    "//etc/passwd", "/assets//etc/passwd", "/assets/..\\..\\secret.txt", "/%5c..%5csecret.txt",
    "/assets/%00", "/index.html/..%2f..%2fsecret.txt", "/.%2e/secret.txt", "/assets/%252e%252e/secret.txt",
]


def test_nothing_outside_the_build_is_ever_served(built):
    for path in TRAVERSALS:
        for headers in (HTML, {"Accept": "*/*"}, {}):
            status, _, body = built.get(path, headers)
            assert SECRET.encode() not in body and b"root:" not in body, (path, status)
            assert status in (200, 400, 401, 404), (path, status)  # 401: no route, so no public one
            if status == 200:
                assert body.decode() == INDEX, path


def test_resolve_stays_inside_the_root(tmp_path):
    dist = make_build(tmp_path)
    assert resolve(dist, "index.html") == (dist / "index.html").resolve()
    assert resolve(dist, "assets/app-1a2b3c.js") is not None
    for bad in ("../secret.txt", "assets/../../secret.txt", "/etc/passwd", "assets/link-out.js", ".env",
                "linked-dir/secret.txt", "assets", "", "assets/.hidden.js", "a\x00b", "assets/../index.html/.."):
        assert resolve(dist, bad) is None, bad
    assert resolve(tmp_path / "missing", "index.html") is None


def test_the_control_socket_serves_no_app(built):
    with pytest.raises(ApiError) as caught:
        built.daemon.client().get("/")
    assert caught.value.code is ErrorCode.NOT_FOUND


def test_without_a_build_a_page_says_how_to_make_one(daemon_factory, tmp_path):
    dist = tmp_path / "empty-dist"
    daemon = daemon_factory("--gpus=fake:1", env={"GPUPLANE_WEB_DIR": str(dist)}).start()
    daemon.wait_ready()
    front = Front(daemon)
    for path in ("/", "/jobs/job_1"):
        status, headers, body = front.get(path, HTML)
        assert status == 503 and headers["content-type"] == "text/html; charset=utf-8", path
        text = body.decode()
        assert "not built" in text and "make web" in text and "Traceback" not in text
        assert str(dist) not in text  # no paths of this machine for whoever asks
    assert front.get("/assets/app.js")[0] == 404
    assert front.get("/api/v1/jobs", {"Authorization": f"Bearer {front.token()}"})[0] == 200
    assert "no web UI build in" in daemon.log()
    # A build made while the daemon runs is served at once.
    os.rename(make_build(tmp_path / "later"), dist)
    status, _, body = front.get("/", HTML)
    assert (status, body.decode()) == (200, INDEX)
