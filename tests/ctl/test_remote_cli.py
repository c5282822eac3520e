"""gpuplanectl against a remote daemon: ``--server``/``--token``/``--profile``, their environment
variables and ``ctl.toml`` profiles.

First the settings alone (``gpuplanectl.remote.resolve``), then ``DaemonClient`` against a
small stdlib HTTP(S) stand-in (keep-alive, a stale connection, TLS, error wording), then the
real thing: a daemon's HTTP front driven by the same commands as its Unix socket, with the
same output, and the token never printed.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from gpuplanectl import client as client_module
from gpuplanectl.client import DaemonClient, DaemonUnreachable
from gpuplanectl.remote import RemoteError, Server, parse_server, profile_path, resolve
from helpers import DaemonProcess, ctl_follower, wait_for
from jobhelpers import wait_job

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER

SECRET = "gpp_01ABCDEFGHJKMNPQRSTVWXYZ01_" + "s" * 43


# --- the settings: flags, environment, profiles ----------------------------------------


def _resolve(tmp_path: Path, env: dict[str, str] | None = None, warnings: list[str] | None = None, **flags):
    options = {"server": None, "token": None, "profile": None, **flags}
    runtime_dir_given = options.pop("runtime_dir_given", False)
    return resolve(**options, runtime_dir_given=runtime_dir_given,
                   env={"XDG_CONFIG_HOME": str(tmp_path), **(env or {})},
                   warn=(warnings if warnings is not None else []).append)


def _profiles(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = profile_path({"XDG_CONFIG_HOME": str(tmp_path)})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_nothing_given_means_the_local_socket(tmp_path):
    assert _resolve(tmp_path) is None
    assert _resolve(tmp_path, {"GPUPLANE_TOKEN": SECRET}) is None  # a token alone names no server
    _profiles(tmp_path, '[profiles.lab]\nserver = "https://lab.example"\ntoken = "t1"\n')
    assert _resolve(tmp_path) is None  # profiles, but no default_profile


def test_flags_beat_the_environment_which_beats_the_default_profile(tmp_path):
    _profiles(tmp_path, 'default_profile = "lab"\n[profiles.lab]\nserver = "https://lab.example:8443/gp/"\n'
                        'token = "t-lab"\n[profiles.ci]\nserver = "http://ci.example"\ntoken = "t-ci"\n')
    env = {"GPUPLANE_SERVER": "http://env.example:8765", "GPUPLANE_TOKEN": "t-env"}

    found = _resolve(tmp_path)
    assert (found.server, found.token, found.source) == (
        Server("https", "lab.example", 8443, "/gp"), "t-lab", "profile lab")
    assert found.server.url == "https://lab.example:8443/gp"

    found = _resolve(tmp_path, env)
    assert (found.server.url, found.token, found.source) == ("http://env.example:8765", "t-env", "GPUPLANE_SERVER")

    found = _resolve(tmp_path, env, server="https://flag.example", token="t-flag")
    assert (found.server.url, found.token, found.source) == ("https://flag.example", "t-flag", "--server")
    assert found.again == "gpuplanectl --server https://flag.example"
    assert "t-flag" not in repr(found)

    # --profile is a flag: it beats the environment; GPUPLANE_PROFILE beats default_profile.
    found = _resolve(tmp_path, env, profile="ci")
    assert (found.server.url, found.token, found.again) == ("http://ci.example", "t-ci", "gpuplanectl --profile ci")
    found = _resolve(tmp_path, {"GPUPLANE_PROFILE": "ci"})
    assert (found.server.url, found.token) == ("http://ci.example", "t-ci")
    # A token flag with a profile's server.
    assert _resolve(tmp_path, profile="ci", token="t-flag").token == "t-flag"

    # An explicit --runtime-dir means the daemon here, whatever the environment says.
    assert _resolve(tmp_path, env, runtime_dir_given=True) is None
    with pytest.raises(RemoteError, match="--runtime-dir is for a daemon on this machine; it does not go with --server"):
        _resolve(tmp_path, server="http://x.example", runtime_dir_given=True)


def test_a_profiles_token_only_goes_to_its_own_server(tmp_path):
    path = _profiles(tmp_path, 'default_profile = "lab"\n[profiles.lab]\nserver = "https://lab.example"\ntoken = "t-lab"\n')
    # The same server spelled another way still gets it.
    assert _resolve(tmp_path, server="HTTPS://lab.example:443/").token == "t-lab"
    with pytest.raises(RemoteError) as caught:
        _resolve(tmp_path, server="https://elsewhere.example")
    message = str(caught.value)
    assert message.startswith("no API token for https://elsewhere.example (profile 'lab' is for "
                              "https://lab.example; its token goes nowhere else): give --token")
    assert str(path) in message and "t-lab" not in message
    with pytest.raises(RemoteError, match="no API token for https://elsewhere.example"):
        _resolve(tmp_path, {"GPUPLANE_SERVER": "https://elsewhere.example"})


def test_token_file_and_the_warning_about_readable_files(tmp_path):
    token_file = tmp_path / "lab.token"
    token_file.write_text(SECRET + "\n")
    token_file.chmod(0o600)
    path = _profiles(tmp_path, '[profiles.lab]\nserver = "http://lab.example"\ntoken_file = "../lab.token"\n'
                               '[profiles.inline]\nserver = "http://lab.example"\ntoken = "t-inline"\n', mode=0o644)
    warnings: list[str] = []
    assert _resolve(tmp_path, warnings=warnings, profile="lab").token == SECRET  # relative to ctl.toml's dir
    assert warnings == []  # the token's file is private; ctl.toml holds none for this profile

    token_file.chmod(0o640)
    assert _resolve(tmp_path, warnings=warnings, profile="lab").token == SECRET
    assert warnings == [f"warning: {token_file} holds an API token and is readable by its group (mode 0640); "
                        f"make it private: chmod 600 {token_file}"]

    warnings.clear()
    assert _resolve(tmp_path, warnings=warnings, profile="inline").token == "t-inline"
    assert warnings == [f"warning: {path} holds an API token and is readable by group and others (mode 0644); "
                        f"make it private: chmod 600 {path}"]
    warnings.clear()
    path.chmod(0o600)
    _resolve(tmp_path, warnings=warnings, profile="inline")
    assert warnings == []

    token_file.unlink()
    with pytest.raises(RemoteError, match=r"profile 'lab': cannot read its token_file .*lab.token: No such file"):
        _resolve(tmp_path, profile="lab")


@pytest.mark.parametrize(("text", "flags", "error"), [
    (None, {"profile": "lab"}, "no profile 'lab' (from --profile): there is no {path}"),
    ('[profiles.lab]\nserver = "http://x"\n[profiles.ci]\nserver = "http://y"\n', {"profile": "nope"},
     "no profile 'nope' (from --profile) in {path}; it has: ci, lab"),
    ('default_profile = "gone"\n', {}, "no profile 'gone' (from default_profile) in {path}; it has: none"),
    ("[profiles.lab\nserver = 1\n", {}, "{path} is not valid TOML: "),
    ("x = " + "[" * 5000 + "\n", {}, "{path} is not valid TOML: arrays or tables nested too deeply"),
    ('[profiles.lab]\nserver = "ftp://x"\n', {"profile": "lab"},
     "profile 'lab' in {path}: expected an http:// or https:// URL"),
    ('[profiles.lab]\ntoken = "t"\n', {"profile": "lab"}, "profile 'lab' in {path} has no server"),
    ('[profiles.lab]\nserver = "http://x"\ntoken = "t"\ntoken_file = "f"\n', {"profile": "lab"},
     "profile 'lab' in {path} has both token and token_file"),
    ('[profiles.lab]\nserver = "http://x"\ntokne = "t"\n', {"profile": "lab"},
     "profile 'lab' in {path}: unknown key 'tokne' (a profile takes server, and token or token_file)"),
    (None, {"server": "gpu.example.com:8765", "token": "t"}, "--server: expected an http:// or https:// URL"),
    (None, {"server": "unix:///run/gpuplane.sock", "token": "t"}, "--server: expected an http:// or https:// URL"),
    (None, {"server": "http://x.example:99999", "token": "t"}, "--server: not a URL"),
    (None, {"token": "t"}, "--token needs a server"),
    (None, {"server": "http://x.example"}, "no API token for http://x.example: give --token"),
    (None, {"server": "http://x.example", "token": "two words"}, "the token from --token is empty or holds spaces"),
])
def test_unusable_settings(tmp_path, text, flags, error):
    path = profile_path({"XDG_CONFIG_HOME": str(tmp_path)})
    if text is not None:
        _profiles(tmp_path, text)
    with pytest.raises(RemoteError) as caught:
        _resolve(tmp_path, **flags)
    assert str(caught.value).startswith(error.format(path=path)), caught.value


@pytest.mark.parametrize("url", [f"https://me:{SECRET}@gpu.example", f"https://gpu.example/?token={SECRET}",
                                 f"https://{SECRET}@gpu.example", f"https://gpu.example/{SECRET}"])
def test_a_token_in_the_url_is_refused_and_not_repeated(url):
    with pytest.raises(RemoteError) as caught:
        parse_server(url, "--server")
    assert "must not carry a token" in str(caught.value)
    assert SECRET not in str(caught.value)


# --- the client, against a stand-in server ----------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: _StandIn

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: object, *, close: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header(API_VERSION_HEADER, str(API_VERSION))
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = close  # without saying so: as a server dropping an idle connection

    def do_GET(self) -> None:
        self.server.seen.append((self.command, self.path, self.client_address[1], self.headers.get("Authorization")))
        if self.headers.get("Authorization") != f"Bearer {SECRET}":
            # A careless server that repeats what it was sent.
            self._send(401, {"error": {"code": "unauthorized", "message": f"bad token {self.headers.get('Authorization')}"}})
        elif self.path == "/gp/api/v1/daemon":
            self._send(200, {"state": "READY"})
        elif self.path == "/gp/api/v1/drop":
            self._send(200, {"dropped": True}, close=True)
        elif self.path == "/gp/api/v1/forbidden":
            self._send(403, {"error": {"code": "forbidden", "message": "token 'ro' lacks the 'write' scope this needs",
                                       "details": {"needed": "write", "scopes": ["read"]}}})
        elif self.path == "/gp/api/v1/proxy":
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/gp/api/v1/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b": keep-alive\n\nid: 7\nevent: stdout\ndata: hello\n\nevent: end\ndata: {}\n\n")
            self.close_connection = True
        else:
            self._send(404, {"error": {"code": "not_found", "message": f"no such endpoint: GET {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        self.server.seen.append((self.command, self.path, self.client_address[1], self.headers.get("Authorization")))
        self._send(201, {"echo": body})


class _StandIn(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str, int, str | None]] = []


@pytest.fixture
def stand_in() -> Iterator[_StandIn]:
    server = _StandIn()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _client(server: _StandIn, token: str = SECRET, scheme: str = "http") -> DaemonClient:
    return DaemonClient.remote(Server(scheme, "127.0.0.1", server.server_address[1], "/gp"), token, timeout=5)


def test_one_kept_alive_connection_with_the_token_in_the_header(stand_in):
    with _client(stand_in) as client:
        assert client.get("/api/v1/daemon") == {"state": "READY"}
        assert client.post("/api/v1/jobs", {"command": ["true"]}) == {"echo": {"command": ["true"]}}
        assert client.get("/api/v1/daemon") == {"state": "READY"}
    assert [(method, path) for method, path, _, _ in stand_in.seen] == [
        ("GET", "/gp/api/v1/daemon"), ("POST", "/gp/api/v1/jobs"), ("GET", "/gp/api/v1/daemon")]
    assert len({port for _, _, port, _ in stand_in.seen}) == 1  # one connection for all three
    assert {auth for _, _, _, auth in stand_in.seen} == {f"Bearer {SECRET}"}


def test_a_connection_the_server_closed_is_replaced(stand_in, monkeypatch):
    with _client(stand_in) as client:
        assert client.get("/api/v1/drop") == {"dropped": True}
        wait_for(lambda: client_module._dropped(client._kept.sock), what="the server to close the connection")
        # Seen closed before use: a fresh connection, even for a POST.
        assert client.post("/api/v1/jobs", {"n": 1}) == {"echo": {"n": 1}}
        assert client.get("/api/v1/drop") == {"dropped": True}
        wait_for(lambda: client_module._dropped(client._kept.sock), what="the server to close the connection")
        # Closed but not seen so (a race): the GET fails on it, then goes again on a fresh one.
        monkeypatch.setattr(client_module, "_dropped", lambda sock: False)
        assert client.get("/api/v1/daemon") == {"state": "READY"}
    ports = [port for _, _, port, _ in stand_in.seen]
    assert len(ports) == 4 and len(set(ports)) == 3 and ports[1] == ports[2] != ports[3]


def test_errors_name_the_server_and_never_the_token(stand_in):
    with _client(stand_in, token="gpp_wrong") as client, pytest.raises(ApiError) as caught:
        client.get("/api/v1/daemon")
    assert caught.value.code is ErrorCode.UNAUTHORIZED
    assert caught.value.message == "the server refused the token: bad token Bearer [token]"

    with _client(stand_in) as client:
        with pytest.raises(ApiError) as caught:
            client.get("/api/v1/forbidden")
        assert (caught.value.code, caught.value.message) == (
            ErrorCode.FORBIDDEN, "the token lacks the 'write' scope this needs (it has: read)")
        with pytest.raises(ApiError) as caught:
            client.get("/api/v1/proxy")  # a proxy's bare 502 is "unavailable", which -f rides out
        assert (caught.value.code, caught.value.message) == (ErrorCode.UNAVAILABLE, "HTTP 502 with no error body")

    port = stand_in.server_address[1]
    stand_in.shutdown()
    stand_in.server_close()
    with _client(stand_in) as client, pytest.raises(DaemonUnreachable) as unreachable:
        client.get("/api/v1/daemon")
    assert str(unreachable.value) == f"cannot reach http://127.0.0.1:{port}/gp: Connection refused"


def test_events_stream_over_tcp(stand_in):
    client = _client(stand_in)
    with closing(client.events("/api/v1/stream", last_event_id="3")) as events:
        got = list(events)
    assert [(e.event, e.data, e.id) for e in got] == [("stdout", "hello", "7"), ("end", "{}", "7")]
    with pytest.raises(ApiError, match="the server refused the token"):
        _client(stand_in, token="nope").events("/api/v1/stream")


@pytest.fixture
def tls_stand_in(stand_in, tmp_path) -> Iterator[tuple[_StandIn, Path]]:
    """The stand-in behind TLS with a self-signed certificate for 127.0.0.1."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    stand_in.socket = context.wrap_socket(stand_in.socket, server_side=True)
    yield stand_in, cert


def test_https_checks_the_certificate(tls_stand_in, monkeypatch):
    server, cert = tls_stand_in
    with _client(server, scheme="https") as client, pytest.raises(DaemonUnreachable) as caught:
        client.get("/api/v1/daemon")
    assert str(caught.value).startswith(
        f"cannot reach https://127.0.0.1:{server.server_address[1]}/gp: TLS certificate verification failed: ")

    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust it, as one would a private CA
    with _client(server, scheme="https") as client:
        assert client.get("/api/v1/daemon") == {"state": "READY"}
        assert client.post("/api/v1/jobs", {"n": 1}) == {"echo": {"n": 1}}  # head and body in one TLS write
        assert client.get("/api/v1/daemon") == {"state": "READY"}
        with closing(client.events("/api/v1/stream")) as events:
            assert [e.event for e in events] == ["stdout", "end"]


# --- against a real daemon's HTTP front -----------------------------------------------------

# What moves between two runs a moment apart: durations ("up 3s", "1m02s"), the time of the
# node's latest sample, and a busy GPU's or the host's readings.
_DURATION = re.compile(r"\b\d+(?:h\d\dm|m\d\ds|s)\b")
_CLOCK = re.compile(r"\b\d\d:\d\d:\d\d\b")
_READING = re.compile(r"\d+(?:\.\d+)?(?=%|C\b|/| W\b|G\b| [KMGT]?i?B\b)")
_LOAD = re.compile(r"(?<=load )\d+\.\d+ \d+\.\d+ \d+\.\d+")  # the kernel updates it every 5 s


def _steady(text: str) -> str:
    """The output with what moves between two runs a moment apart (times, readings) masked."""
    return _LOAD.sub("L", _READING.sub("N", _CLOCK.sub("HH:MM:SS", _DURATION.sub("T", text))))


class Front:
    """A READY daemon (one fake GPU, node ``box``), its HTTP front's URL, and tokens made over its socket."""

    def __init__(self, daemon: DaemonProcess, url: str, tokens: dict[str, str], elsewhere: Path) -> None:
        self.daemon = daemon
        self.url = url
        self.tokens = tokens
        self.elsewhere = elsewhere  # a runtime dir with no daemon: remote runs cannot fall back to the socket

    def run(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """gpuplanectl with the daemon's environment plus ``env``; no token ever shows in what it prints."""
        result = subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env={**self.daemon.env, **(env or {})},
                                cwd=cwd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        self.check_quiet(result.stdout, result.stderr)
        return result

    def remote(self, *args: str, token: str = "rw", env: dict[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        secret = self.tokens.get(token, token)
        return self.run("--server", self.url, "--token", secret, *args,
                        env={"GPUPLANE_RUNTIME_DIR": str(self.elsewhere), **(env or {})}, cwd=cwd)

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return ctl_follower(list(args), {**self.daemon.env, **(env or {})})

    def remote_env(self, token: str = "rw") -> dict[str, str]:
        return {"GPUPLANE_SERVER": self.url, "GPUPLANE_TOKEN": self.tokens[token],
                "GPUPLANE_RUNTIME_DIR": str(self.elsewhere)}

    def lose_gpu(self) -> Path:
        """Make fake GPU 0 fall off the bus (a GPU_LOST event); unlink the returned file to bring it back."""
        mark = self.daemon.runtime_dir / "fake-gpus" / "0" / "lost"
        mark.touch()
        wait_for(lambda: self.daemon.client().get("/api/v1/events?type=GPU_LOST")["events"], what="GPU_LOST")
        return mark

    def recover_gpu(self, mark: Path) -> None:
        mark.unlink()
        wait_for(lambda: self.daemon.client().get("/api/v1/nodes")["nodes"][0]["status"] == "ONLINE",
                 what="the node to be healthy again")

    def check_quiet(self, *outputs: str) -> None:
        for secret in self.tokens.values():
            for text in outputs:
                assert secret not in text


@pytest.fixture
def front(daemon_factory, tmp_path) -> Front:
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[monitor]\nsample_interval_s = 0.2\n[detector]\ninterval_s = 0.2\n")
    daemon = daemon_factory("--gpus", "fake:1", "--node-name", "box", "--config", str(config)).start()
    daemon.wait_ready()
    url = wait_for(lambda: daemon.client().get("/api/v1/daemon")["endpoints"].get("http"), what="the HTTP front")
    tokens = {name: daemon.client().post("/api/v1/tokens", {"name": name, "scopes": scopes})["secret"]
              for name, scopes in (("rw", ["read", "write"]), ("ro", ["read"]), ("admin", ["admin"]))}
    wait_for(lambda: daemon.client().get("/api/v1/nodes")["nodes"], what="the node to register")
    wait_for(lambda: all(a["state"] == "RUNNING" for a in daemon.client().get("/api/v1/actors")["actors"]),
             what="every actor RUNNING")
    return Front(daemon, url, tokens, tmp_path / "elsewhere")


def _same(front: Front, *args: str) -> str:
    """Run ``args`` locally and remotely; both succeed and print the same. Returns the output."""
    local, remote = front.run(*args), front.remote(*args)
    assert (local.returncode, remote.returncode) == (0, 0), (local.stderr, remote.stderr)
    assert _steady(remote.stdout) == _steady(local.stdout), args
    assert remote.stderr == local.stderr, args
    return local.stdout


def test_the_same_commands_print_the_same_remotely(front, tmp_path):
    # submit prints the same shape; the job runs where the daemon is, from the dir it was given.
    result = front.remote("submit", "--name", "hello", "--dir", str(tmp_path), "--",
                          "sh", "-c", "echo out; echo err >&2; exit 3")
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(r"(job_\w+) (QUEUED|DISPATCHING)\n", result.stdout)
    assert match, result.stdout
    job_id = match[1]
    assert wait_job(front.daemon, job_id)["status"] == "FAILED"

    # Events to list: the GPU is lost and found again.
    front.recover_gpu(front.lose_gpu())
    idle = json.loads(front.remote("submit", "--json", "--gpu", "1", "--name", "idle", "--dir", str(tmp_path), "--",
                                   "sleep", "60").stdout)["job"]
    wait_job(front.daemon, idle["id"], lambda j: j["status"] == "RUNNING", what="the job to run")
    # The detector writes RUN_STARTED and RUN_FINISHED a pass later: wait, so both listings see them.
    settled = {("RUN_FINISHED", job_id), ("RUN_STARTED", job_id), ("RUN_STARTED", idle["id"])}
    wait_for(lambda: settled <= {(e["type"], e["job_id"]) for e in front.daemon.client().get("/api/v1/events")["events"]},
             what="the detector's lifecycle events")

    for args in (["status"], ["jobs"], ["jobs", "--json"], ["job", "show", job_id], ["job", "show", "--json", job_id],
                 ["logs", job_id], ["logs", "--json", job_id], ["node", "list"], ["node", "show", "box"],
                 ["events"], ["events", "--json"]):
        _same(front, *args)
    top = front.remote("top", "--once")  # a clock and load averages: the same shape, not the same text
    assert top.returncode == 0 and re.match(r"gpuplane  \d\d:\d\d:\d\d  1 node  1 running  0 queued\n", top.stdout), top
    assert "GPU_LOST" in _same(front, "events")
    assert _same(front, "logs", "--stream", "stdout", job_id) == "out\n"

    # Errors too: an unknown job.
    local, remote = front.run("job", "show", "job_nope"), front.remote("job", "show", "job_nope")
    assert (remote.returncode, remote.stdout, remote.stderr) == (local.returncode, local.stdout, local.stderr)
    assert remote.returncode == 1

    # Cancelling remotely; the admin verbs (tokens) need an admin token.
    result = front.remote("job", "cancel", idle["id"])
    assert result.returncode == 0, result.stderr
    assert wait_job(front.daemon, idle["id"])["status"] == "CANCELLED"
    listed = front.remote("token", "list", token="admin")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[1] for line in listed.stdout.splitlines()[1:]] == ["admin", "ro", "rw"]  # newest first


def test_logs_and_events_follow_over_the_front(front, tmp_path):
    events = {where: front.popen(*args, "events", "-f", "--type", "GPU_LOST", env=env)
              for where, args, env in (("local", (), None),
                                       ("remote", ("--server", front.url), front.remote_env()))}
    try:
        for follower in events.values():
            assert follower.stdout.readline().startswith("TIME ")
        mark = front.lose_gpu()
        lines = {where: follower.stdout.readline() for where, follower in events.items()}
        assert lines["local"] == lines["remote"] and " GPU_LOST " in lines["remote"]
        front.recover_gpu(mark)

        script = "echo first; sleep 1; echo second; echo oops >&2; sleep 60"
        job = json.loads(front.remote("submit", "--json", "--gpu", "1", "--name", "slow", "--dir", str(tmp_path),
                                      "--", "sh", "-c", script).stdout)["job"]
        logs = front.popen("logs", "-f", job["id"], env=front.remote_env())
        assert logs.stdout.readline() == "first\n"
        assert logs.stdout.readline() == "second\n"
        assert logs.stderr.readline() == "oops\n"
        assert front.remote("job", "cancel", job["id"]).returncode == 0
        out, err = logs.communicate(timeout=20)
        assert logs.returncode == 1  # cancelled
        assert err.startswith(f"[job {job['id']} CANCELLED")
        front.check_quiet(out, err)
        for follower in events.values():
            follower.send_signal(signal.SIGINT)
            out, err = follower.communicate(timeout=10)
            assert (follower.returncode, err) == (130, "")
            front.check_quiet(out, err)
    finally:
        for follower in events.values():
            follower.kill()
            follower.wait()


def test_environment_and_profiles(front):
    local = front.run("jobs", "--json")
    by_env = front.run("jobs", "--json", env=front.remote_env())
    assert (by_env.returncode, by_env.stdout, by_env.stderr) == (0, local.stdout, "")

    # A profile, made the default, with its token in a private file: no warning.
    config_home = Path(front.daemon.env["XDG_CONFIG_HOME"])
    token_file = config_home / "gpuplane" / "box.token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(front.tokens["rw"] + "\n")
    token_file.chmod(0o600)
    profiles = config_home / "gpuplane" / "ctl.toml"
    profiles.write_text(f'default_profile = "box"\n\n[profiles.box]\nserver = "{front.url}"\ntoken_file = "box.token"\n'
                        f'\n[profiles.inline]\nserver = "{front.url}/"\ntoken = "{front.tokens["ro"]}"\n')
    profiles.chmod(0o600)
    elsewhere = {"GPUPLANE_RUNTIME_DIR": str(front.elsewhere)}
    by_default = front.run("jobs", "--json", env=elsewhere)
    assert (by_default.returncode, by_default.stdout, by_default.stderr) == (0, local.stdout, "")
    # The flag beats the default profile; the environment names another.
    for how in (["--profile", "inline"], []):
        env = {**elsewhere, "GPUPLANE_PROFILE": "inline"} if not how else elsewhere
        result = front.run(*how, "submit", "--", "true", env=env)
        assert result.returncode == 1 and "the token lacks the 'write' scope" in result.stderr, result.stderr

    # A token in a file others can read: one warning, on stderr, however many requests follow.
    profiles.chmod(0o644)
    result = front.run("--profile", "inline", "status", env=elsewhere)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (f"warning: {profiles} holds an API token and is readable by group and others "
                             f"(mode 0644); make it private: chmod 600 {profiles}\n")

    # An explicit --runtime-dir is the daemon here, whatever the profile file says.
    result = front.run("--runtime-dir", str(front.daemon.runtime_dir), "jobs", "--json")
    assert (result.returncode, result.stdout) == (0, local.stdout)

    # Mistakes in the file are usage errors, before anything is sent.
    profiles.write_text('default_profile = "box"\n[profiles.box\n')
    result = front.run("jobs", env=elsewhere)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {profiles} is not valid TOML: ")
    result = front.run("--profile", "nope", "jobs", "--json", env=elsewhere)
    assert result.returncode == 2
    assert json.loads(result.stdout)["error"]["code"] == "bad_request"


def test_refused_tokens_and_scopes(front):
    wrong = "gpp_01ABCDEFGHJKMNPQRSTVWXYZ01_" + "x" * 43
    front.tokens["wrong"] = wrong  # must not show either
    for args in (["status"], ["jobs"], ["logs", "-f", "job_nope"], ["events", "-f"]):
        result = front.remote(*args, token="wrong")
        assert result.returncode == 1, args
        assert result.stderr.startswith("error: the server refused the token: unknown or revoked API token\n"), result.stderr
        assert "gpuplanectl token create NAME --scope read,write" in result.stderr
    result = front.remote("jobs", "--json", token="wrong")
    error = json.loads(result.stdout)["error"]
    assert (result.returncode, error["code"]) == (1, "unauthorized")
    assert error["message"] == "the server refused the token: unknown or revoked API token"

    # Read-only: reads work, writing names the scope it lacks.
    assert front.remote("jobs", token="ro").returncode == 0
    result = front.remote("submit", "--", "true", token="ro")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: the token lacks the 'write' scope this needs (it has: read)",
        "Use a token with that scope: `gpuplanectl token create NAME --scope write` on the daemon's machine."]
    result = front.remote("token", "list", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["details"]["needed"] == "admin"

    # A revoked token stops working at once.
    assert front.daemon.client().post("/api/v1/tokens/ro/revoke")["token"]["revoked_at"] is not None
    result = front.remote("jobs", token="ro")
    assert result.returncode == 1 and "the server refused the token" in result.stderr


def test_usage_errors_unreachable_servers_and_local_only_commands(front):
    result = front.run("--server", "ftp://box.example", "--token", "t", "status")
    assert (result.returncode, result.stderr) == (
        2, "error: --server: expected an http:// or https:// URL like https://gpu.example.com:8765, got 'ftp://box.example'\n")
    secret = front.tokens["rw"]
    result = front.run("--server", f"http://me:{secret}@127.0.0.1:1", "status")
    assert result.returncode == 2 and "must not carry a token" in result.stderr

    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free, and nothing listens once closed
    result = front.run("--server", f"http://127.0.0.1:{port}", "--token", secret, "status")
    assert (result.returncode, result.stderr) == (1, f"error: cannot reach http://127.0.0.1:{port}: Connection refused\n")
    result = front.run("--token", secret, "--server", "http://no-such-host.invalid:8765", "jobs", "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["message"].startswith("cannot reach http://no-such-host.invalid:8765: ")
    assert error["details"] == {"reason": "unreachable", "server": "http://no-such-host.invalid:8765"}

    result = front.remote("daemon")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: `gpuplanectl daemon` starts gpuplaned on this machine; it does not work "
                                    f"with a remote server ({front.url}, from --server)\n")


def test_the_client_keeps_its_connection_to_the_front(front):
    with DaemonClient.remote(parse_server(front.url, "test"), front.tokens["ro"], timeout=10) as client:
        assert client.get("/api/v1/daemon")["state"] == "READY"
        sock = client._kept.sock
        for _ in range(5):
            client.get("/api/v1/jobs")
        assert client._kept.sock is sock


def test_shutdown_over_the_front_needs_admin_and_waits_for_it_to_close(front):
    result = front.remote("shutdown")  # rw: not enough
    assert result.returncode == 1 and "lacks the 'admin' scope" in result.stderr
    result = front.remote("shutdown", token="admin")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"gpuplaned (pid {front.daemon.pid}) at {front.url} stopped\n"
    assert front.daemon.wait_exit() == 0
