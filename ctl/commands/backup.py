"""``gpuplanectl backup [--to DIR] [--agent]`` and ``gpuplanectl restore DIR``: the daemon's data,
copied while it runs, and put back while it does not.

``backup`` works on the daemon's machine (``--server`` is refused), on the files of the daemon
that answers in the runtime dir (its ``home`` and ``config_file``), or of ``--home`` when none
runs. Into a new private dir (0700; one that exists and is not empty is refused), it writes:

- ``gpuplane.db``: an online, consistent copy through SQLite's backup API, taken in one step,
  so it is the database as of one committed transaction while the daemon goes on writing (WAL
  readers do not block the writer); then ``PRAGMA integrity_check`` on the copy;
- the other files at the top of the home (``webhook.key``, without which the webhooks' sealed
  secrets cannot be opened), and the config file as ``gpuplaned.toml``;
- with ``--agent`` (seed ``backup-agent``, for a node host): ``agent.tar.gz`` of the home's
  ``jobs/`` (every job's logs and runtime files), ``uplink/`` (the spool of what the server has
  not acknowledged yet, and ``agent-id``, the id the server knows this agent by) and ``spool/``
  (SDK batches not yet delivered). Files are read as they are; one deleted meanwhile (an
  acknowledged spool segment) is left out; a torn last spool line is cut off when the spool
  opens. The agent token, when the config names it (``[uplink] token_file``), is copied as
  ``agent-token``; one given in ``GPUPLANE_TOKEN`` is not the backup's to keep (it says so);
- ``manifest.json``: what is in it (sizes, the schema version, where it came from, when).

An agent (role agent) keeps no database: ``backup --agent`` on one writes the rest, so that a
reinstalled box restored from it resumes as the same agent with nothing it had not sent yet
lost; without ``--agent`` it is refused with a message that says to add it.

``restore DIR`` puts a backup into a home (``--home``, else the daemon's rules) while no daemon
runs: it refuses, naming the pid, while one holds the runtime dir's lock or any process has the
home's database open, and it holds that lock itself meanwhile, so none can start halfway. It
checks the backup first (manifest, integrity), moves the home's current database files aside
into ``before-restore-<time>/`` (nothing is deleted), and copies the backup's files in, 0600.
An ``agent.tar.gz`` is unpacked only with ``--agent``, only into a home with no ``jobs/`` or
``uplink/`` yet, and only members that stay inside it (tarfile's ``data`` filter); an agent's
backup (no database) needs ``--agent``. The config and the agent token are not put back:
``restore`` says where the backup's copies are.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sqlite3
import tarfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from gpuplanectl import render
from gpuplanectl.client import NoDaemon
from gpuplanectl.commands import JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.commands.daemon import daemon_home
from gpuplanectl.exit_codes import EXIT_FAILURE

from gpuplaned.protocol.discovery import LOCK_NAME, PortFileError, read_portfile
from gpuplaned.protocol.errors import ErrorCode

DB_NAME = "gpuplane.db"
DB_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm")
MANIFEST = "manifest.json"
CONFIG_COPY = "gpuplaned.toml"
AGENT_ARCHIVE = "agent.tar.gz"
AGENT_DIRS = ("jobs", "uplink", "spool")  # what a node host keeps that its server does not
TOKEN_COPY = "agent-token"  # the agent's [uplink] token_file, copied
FORMAT = 1  # the manifest's; restore refuses one it does not know


# --- backup ----------------------------------------------------------------------------------


def backup(
    ctx: typer.Context,
    to: Annotated[Path | None, typer.Option("--to", metavar="DIR", show_default=False,
                                            help="A new dir for the backup [default: ./gpuplane-backup-HOST-TIME].")] = None,
    agent: Annotated[bool, typer.Option("--agent", help="Also archive this node host's job dirs, unsent spools and "
                                                        "agent id (agent.tar.gz), and copy its token file; an agent "
                                                        "(no database) is backed up with it.")] = False,
    home: Annotated[str | None, typer.Option("--home", metavar="DIR", show_default=False,
                                             help="The data dir when no daemon runs [env GPUPLANE_HOME].")] = None,
    json_output: JsonOption = False,
) -> None:
    """Copy the daemon's database (online and consistent), its key and config into a new dir;
    with --agent also its job dirs, spools and identity (an agent has no database)."""
    g = globals_of(ctx)
    source, config, role = _source(g, home, json_output)
    db = source / DB_NAME
    is_agent = role == "agent" or (role is None and not db.is_file() and (source / "uplink").is_dir())
    if not db.is_file():
        if is_agent and not agent:
            fail(json_output, ErrorCode.BAD_REQUEST, f"{source} is an agent's home: it keeps no database, and its "
                 "unsent spool, job dirs and identity are backed up with --agent", {"home": str(source)})
        if not is_agent:
            fail(json_output, ErrorCode.NOT_FOUND, f"no database at {db}: nothing to back up", {"home": str(source)})
    target = to or Path.cwd() / f"gpuplane-backup-{socket.gethostname()}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    target = target.expanduser().absolute()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        fail(json_output, ErrorCode.CONFLICT, f"{target} exists and is not an empty dir: give --to a new one",
             {"to": str(target)})
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(target, 0o700)
        manifest = _write_backup(source, config, target, agent, role)
    except (OSError, sqlite3.Error, tarfile.TarError) as exc:
        fail(json_output, ErrorCode.INTERNAL, f"the backup into {target} failed: {exc}", {"to": str(target)})
    if json_output:
        render.print_json({"backup": manifest})
        return
    print(f"backed up {source} to {target}")
    if manifest["database"] is not None:
        db_line = f"  {DB_NAME}: {render.format_bytes(manifest['database']['bytes'])}, schema " \
                  f"{manifest['database']['schema_version']}, integrity {manifest['database']['integrity']}"
        print(render.printable(db_line))
    for name in manifest["files"]:
        print(render.printable(f"  {name}"))
    kept = manifest.get("agent")
    if kept:
        print(render.printable(f"  {AGENT_ARCHIVE}: {kept['files']} files, {render.format_bytes(kept['bytes'])} "
                               f"({', '.join(d + '/' for d in kept['dirs']) or 'no job dirs or spools yet'})"))
        if kept["token_file"] is not None:
            print(render.printable(f"  {TOKEN_COPY}: the agent token ([uplink] token_file {kept['token_file']})"))
        elif is_agent:
            print("  the agent token is not in it: the config names no [uplink] token_file, so it comes from "
                  "GPUPLANE_TOKEN; keep it yourself")


def _source(g: Any, home: str | None, json_output: bool) -> tuple[Path, Path | None, str | None]:
    """The home, config file and role of the daemon that answers here, else of ``--home`` (role
    None: no daemon to ask)."""
    try:
        with reporting(g, json_output):
            info = connect(g, timeout=10.0).get("/api/v1/daemon")
    except NoDaemon:
        info = None
    if info is not None:
        if home and Path(home).expanduser().absolute() != Path(info["home"]):
            fail(json_output, ErrorCode.BAD_REQUEST, f"--home {home} is not the running daemon's home ({info['home']})",
                 {"home": home, "daemon_home": info["home"]})
        config = Path(info["config_file"]) if info.get("config_file") else None
        return Path(info["home"]), config, info.get("role")
    found = daemon_home(home, None, os.environ)
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "gpuplane" / "gpuplaned.toml"
    return found, config if config.is_file() else None, None


def _write_backup(source: Path, config: Path | None, target: Path, agent: bool, role: str | None) -> dict[str, Any]:
    started = time.time()
    database = _copy_database(source / DB_NAME, target / DB_NAME) if (source / DB_NAME).is_file() else None
    files = []
    for entry in sorted(source.iterdir()):
        if entry.is_file() and not entry.is_symlink() and entry.name not in DB_FILES:
            _private_copy(entry, target / entry.name)
            files.append(entry.name)
    if config is not None and config.is_file():
        _private_copy(config, target / CONFIG_COPY)
        files.append(CONFIG_COPY)
    manifest: dict[str, Any] = {
        "format": FORMAT, "gpuplane_version": _version(), "created_at": int(started * 1000),
        "host": socket.gethostname(), "role": role, "home": str(source), "config_file": str(config) if config else None,
        "database": database, "files": files, "took_s": 0.0}
    if agent:
        manifest["agent"] = _archive(source, target / AGENT_ARCHIVE)
        token = _token_file(config)
        if token is not None and not (token.parent == source and token.name in files):  # else a home file already
            _private_copy(token, target / TOKEN_COPY)
        manifest["agent"]["token_file"] = str(token) if token is not None else None
    manifest["took_s"] = round(time.time() - started, 3)
    _private_write(target / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _token_file(config: Path | None) -> Path | None:
    """The agent token's file that ``config`` names (``[uplink] token_file``), if it names one
    that exists; the daemon itself reports a config it cannot read."""
    if config is None:
        return None
    try:
        import tomllib  # only here

        named = tomllib.loads(config.read_text(encoding="utf-8")).get("uplink", {}).get("token_file")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(named, str) or not named:
        return None
    path = Path(named).expanduser()
    return path if path.is_file() else None


def _version() -> str | None:
    from importlib import metadata  # only here

    try:
        return metadata.version("gpuplane")
    except metadata.PackageNotFoundError:
        return None


def _copy_database(db: Path, copy: Path) -> dict[str, Any]:
    """SQLite's backup API in one step: one read transaction, so one committed state."""
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        dst = sqlite3.connect(copy)
        try:
            src.backup(dst)
            return _check(dst, copy)
        finally:
            dst.close()
    finally:
        src.close()


def _check(conn: sqlite3.Connection, path: Path) -> dict[str, Any]:
    rows = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    return {"bytes": path.stat().st_size, "schema_version": conn.execute("PRAGMA user_version").fetchone()[0],
            "integrity": "ok" if rows == ["ok"] else "; ".join(rows[:5])}


def _archive(source: Path, archive: Path) -> dict[str, Any]:
    files = size = 0
    fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for top in AGENT_DIRS:
            root = source / top
            if not root.is_dir():
                continue
            for directory, dirs, names in os.walk(root):
                dirs.sort()
                for name in sorted(names):
                    path = Path(directory) / name
                    try:
                        info = tar.gettarinfo(str(path), arcname=str(path.relative_to(source)))
                        if not info.isfile():
                            continue  # sockets, links: nothing to restore
                        with open(path, "rb") as f:
                            tar.addfile(info, f)  # the size as of the stat: a growing log gives its prefix
                    except FileNotFoundError:
                        continue  # deleted meanwhile (an acknowledged spool segment)
                    files += 1
                    size += info.size
    return {"files": files, "bytes": size, "dirs": [d for d in AGENT_DIRS if (source / d).is_dir()]}


def _private_copy(src: Path, dst: Path) -> None:
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as data:
        shutil.copyfileobj(data, out)


def _private_write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


# --- restore ---------------------------------------------------------------------------------


def restore(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="A dir written by gpuplanectl backup.")],
    home: Annotated[str | None, typer.Option("--home", metavar="DIR", show_default=False,
                                             help="The data dir to restore into [env GPUPLANE_HOME; default "
                                                  "~/.local/share/gpuplane].")] = None,
    agent: Annotated[bool, typer.Option("--agent", help="Also unpack agent.tar.gz (job logs, spools) into a home "
                                                        "that has none yet.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Put a backup back into a home while no daemon runs; the current database is moved aside."""
    g = globals_of(ctx)
    source = directory.expanduser().absolute()
    manifest = _read_backup(source, json_output)
    if manifest.get("database") is None and not agent:
        fail(json_output, ErrorCode.BAD_REQUEST,
             f"{source} is an agent's backup (no database): restore it with --agent", {"dir": str(source)})
    target = daemon_home(home, None, os.environ)
    lock = _lock_runtime_dir(g.runtime_dir, json_output)
    try:
        _refuse_if_open(target / DB_NAME, json_output)
        if agent and manifest.get("agent"):
            busy = [d for d in ("jobs", "uplink") if (target / d).is_dir() and any((target / d).iterdir())]
            if busy:
                fail(json_output, ErrorCode.CONFLICT, f"{target} already has {' and '.join(d + '/' for d in busy)}: "
                     "unpack the agent archive only into a home without them", {"home": str(target), "dirs": busy})
        try:
            done = _put_back(source, target, manifest, agent)
        except (OSError, tarfile.TarError) as exc:
            fail(json_output, ErrorCode.INTERNAL, f"the restore into {target} failed: {exc}", {"home": str(target)})
    finally:
        os.close(lock)
    if json_output:
        render.print_json({"restored": done})
        return
    print(render.printable(f"restored {source} into {target}"))
    if done["moved_aside"]:
        print(render.printable(f"  the database that was there: {done['moved_aside']}"))
    if done["config_in_backup"]:
        print(render.printable(f"  config: not put back; the backup's copy is {done['config_in_backup']}"))
    if done["token_in_backup"]:
        print(render.printable(f"  agent token: not put back; the backup's copy is {done['token_in_backup']} "
                               f"(it was {(manifest.get('agent') or {}).get('token_file')})"))


def _read_backup(source: Path, json_output: bool) -> dict[str, Any]:
    try:
        manifest = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail(json_output, ErrorCode.BAD_REQUEST, f"{source} is not a backup: it has no {MANIFEST}", {"dir": str(source)})
    except (OSError, ValueError) as exc:
        fail(json_output, ErrorCode.BAD_REQUEST, f"{source / MANIFEST} cannot be read: {exc}", {"dir": str(source)})
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        fail(json_output, ErrorCode.BAD_REQUEST, f"{source / MANIFEST}: not a backup format this gpuplanectl knows "
             f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r}, expected {FORMAT})",
             {"dir": str(source)})
    if manifest.get("database") is None:
        return manifest  # an agent's: its archive is checked as it is unpacked
    db = source / DB_NAME
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            checked = _check(conn, db)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        fail(json_output, ErrorCode.BAD_REQUEST, f"{db} is not a usable database: {exc}", {"dir": str(source)})
    if checked["integrity"] != "ok":
        fail(json_output, ErrorCode.BAD_REQUEST, f"{db} fails its integrity check: {checked['integrity']}",
             {"dir": str(source)})
    return manifest


def _lock_runtime_dir(runtime_dir: Path, json_output: bool) -> int:
    """The daemon's own lock on its runtime dir, held while restoring; refused while a daemon has it."""
    try:
        runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(runtime_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        fail(json_output, ErrorCode.INTERNAL, f"cannot use the runtime dir {runtime_dir}: {exc.strerror}")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            pid: int | None = read_portfile(runtime_dir).pid
        except (OSError, PortFileError):
            pid = None
        fail(json_output, ErrorCode.CONFLICT, f"gpuplaned{f' (pid {pid})' if pid else ''} is running for "
             f"{runtime_dir}: stop it first (gpuplanectl shutdown), then restore",
             {"runtime_dir": str(runtime_dir), "pid": pid}, exit_code=EXIT_FAILURE)
    return fd


def _refuse_if_open(db: Path, json_output: bool) -> None:
    """A daemon of another runtime dir on the same home: any process with the database open."""
    import psutil  # only here: a scan of the processes

    wanted = {str(db), f"{db}-wal"}
    for process in psutil.process_iter(["pid"]):
        try:
            if any(f.path in wanted for f in process.open_files()):
                fail(json_output, ErrorCode.CONFLICT, f"process {process.pid} has {db} open: stop it first, "
                     "then restore", {"pid": process.pid, "database": str(db)}, exit_code=EXIT_FAILURE)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def _put_back(source: Path, target: Path, manifest: dict[str, Any], agent: bool) -> dict[str, Any]:
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(target, 0o700)
    aside = None
    present = [name for name in DB_FILES if (target / name).exists()]
    if present:
        aside = target / f"before-restore-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        aside.mkdir(mode=0o700)
        for name in present:
            os.rename(target / name, aside / name)
    names = [*([DB_NAME] if manifest.get("database") is not None else []),
             *(n for n in manifest.get("files", []) if n != CONFIG_COPY)]
    for name in names:
        if "/" in name or name.startswith("."):
            continue  # the manifest names top-level files only
        destination = target / name
        if destination.exists() and name != DB_NAME:
            if aside is None:
                aside = target / f"before-restore-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
                aside.mkdir(mode=0o700)
            os.rename(destination, aside / name)
        _private_copy(source / name, destination)
    unpacked = 0
    if agent and manifest.get("agent"):
        with tarfile.open(source / AGENT_ARCHIVE, "r:gz") as tar:
            members = tar.getmembers()
            tar.extractall(target, members=members, filter="data")
            unpacked = len(members)
    config = source / CONFIG_COPY
    token = source / TOKEN_COPY
    return {"home": str(target), "from": str(source), "files": names, "agent_files": unpacked,
            "moved_aside": str(aside) if aside else None, "config_in_backup": str(config) if config.exists() else None,
            "token_in_backup": str(token) if token.exists() else None,
            "schema_version": (manifest.get("database") or {}).get("schema_version")}
