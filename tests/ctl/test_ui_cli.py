"""``gpuplanectl ui``: a one-time login link from the local daemon, used by a real browser-like client."""

from __future__ import annotations

import json
import re
import stat
import time

import httpx
import pytest
from helpers import running_jobs
from jobhelpers import ctl

LINK = re.compile(r"http://127\.0\.0\.1:(\d+)/login\?code=[A-Za-z0-9_-]{43}")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One daemon for the module's link tests: each link is made for its own call and works once,
    so no test needs a fresh daemon, whose start was most of such a test's time."""
    with running_jobs(tmp_path_factory.mktemp("ui")) as jobs:
        yield jobs.daemon


def front_url(daemon) -> str:
    return daemon.client().get("/api/v1/daemon")["endpoints"]["http"]


def test_ui_prints_a_link_that_signs_a_browser_in_once(daemon):
    result = ctl(daemon, "ui")
    assert result.returncode == 0, result.stderr
    url = result.stdout.strip()
    assert result.stdout == url + "\n"  # the link alone on stdout
    match = LINK.fullmatch(url)
    assert match and url.startswith(front_url(daemon) + "/login?code=")
    assert "works once" in result.stderr and "2 minutes" in result.stderr and url not in result.stderr
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        response = browser.get(url)
        assert response.status_code == 303 and response.headers["Location"] == "/"
        who = browser.get(front_url(daemon) + "/api/v1/auth/session").json()["session"]
        assert who["via"] == "cookie" and who["scopes"] == ["read", "write"]
    with httpx.Client(follow_redirects=False, timeout=10) as other:
        assert other.get(url).status_code == 401  # used


def test_ui_json_and_next(daemon):
    result = ctl(daemon, "ui", "--json", "--next", "/jobs/job_123?tab=logs")
    assert result.returncode == 0, result.stderr
    link = json.loads(result.stdout)
    assert set(link) == {"code", "url", "expires_at"} and link["url"].endswith(link["code"])
    assert link["expires_at"] > time.time() * 1000
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        assert browser.get(link["url"]).headers["Location"] == "/jobs/job_123?tab=logs"


def test_ui_refuses_to_land_elsewhere(daemon):
    result = ctl(daemon, "ui", "--next", "https://evil.example/")
    assert result.returncode == 2 and "next" in result.stderr and result.stdout == ""
    result = ctl(daemon, "ui", "--json", "--next", "//evil.example")
    assert result.returncode == 2 and json.loads(result.stdout)["error"]["code"] == "bad_request"


def test_ui_open_starts_the_browser(daemon, tmp_path):
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {opened}\n")
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    result = ctl(daemon, "ui", "--open", env={"BROWSER": f"{browser} %s"})
    assert result.returncode == 0, result.stderr
    assert opened.read_text() == result.stdout.strip()


def test_ui_without_an_http_front_says_so(daemon_factory):
    daemon = daemon_factory("--no-http").start()
    daemon.wait_ready()
    result = ctl(daemon, "ui")
    assert result.returncode == 1 and result.stdout == ""
    assert "HTTP front" in result.stderr and "--no-http" in result.stderr
    assert json.loads(ctl(daemon, "ui", "--json").stdout)["error"]["code"] == "unavailable"


@pytest.mark.parametrize("args", [["--server", "http://127.0.0.1:9"], []])
def test_ui_is_local_only(daemon, args):
    env = {"GPUPLANE_TOKEN": "gpp_01ABCDEFGHJKMNPQRSTVWXYZ01_" + "x" * 43}
    if not args:
        env["GPUPLANE_SERVER"] = "http://127.0.0.1:9"
    result = ctl(daemon, *args, "ui", env=env)
    assert result.returncode == 2 and "remote server" in result.stderr and result.stdout == ""
