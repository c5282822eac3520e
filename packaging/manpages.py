"""Man pages for gpuplaned(1) and gpuplanectl(1), made from the programs' own ``--help``.

Usage: python manpages.py BIN_DIR OUT_DIR VERSION

Runs ``BIN_DIR/gpuplaned --help``, ``BIN_DIR/gpuplanectl --help`` and ``--help`` of each
command that gpuplanectl's help lists, and writes ``OUT_DIR/<prog>.1.gz``. The help text is
kept as it is printed (a preformatted block per command), so a page never drifts from what
the program says. Standard library only: it runs with the package's own interpreter.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

SUMMARY = {
    "gpuplaned": "the GPUPlane daemon: job queue, GPU monitor, training metrics and the control API",
    "gpuplanectl": "control gpuplaned, the GPUPlane daemon",
}
SEE_ALSO = {"gpuplaned": "gpuplanectl", "gpuplanectl": "gpuplaned"}


def help_text(program: Path, *args: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run([str(program), *args, "--help"], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"manpages: {program.name} {' '.join(args)} --help exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def commands(top_help: str) -> list[str]:
    """The command names under ``Commands:`` in a typer/click help (up to its first blank line)."""
    names: list[str] = []
    inside = False
    for line in top_help.splitlines():
        if not line.strip():
            inside = False
            continue
        if not line.startswith(" "):
            inside = line.strip() == "Commands:"
            continue
        if inside and line.startswith("  ") and not line.startswith("   "):
            names.append(line.split()[0])
    return names


def command_sections(program: Path, path: list[str], parent_help: str) -> list[tuple[str, str]]:
    """A section for each command under ``path``, and below a noun one for each of its verbs
    (``COMMAND: JOB`` then ``COMMAND: JOB SUBMIT``), so every command's options are in the page."""
    sections = []
    for name in commands(parent_help):
        text = help_text(program, *path, name)
        sections.append((f"COMMAND: {' '.join([*path, name]).upper()}", text))
        sections += command_sections(program, [*path, name], text)
    return sections


def roff_text(text: str) -> str:
    """Literal text in roff: backslashes escaped, no line read as a request."""
    lines = []
    for line in text.rstrip("\n").splitlines():
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def page(name: str, version: str, sections: list[tuple[str, str]]) -> str:
    out = [f'.TH {name.upper()} 1 "" "gpuplane {version}" "User Commands"',
           ".SH NAME", f"{name} \\- {SUMMARY[name]}"]
    for title, body in sections:
        out += [f".SH {title}", ".nf", roff_text(body), ".fi"]
    out += [".SH SEE ALSO", f".BR {SEE_ALSO[name]} (1)", ""]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    bin_dir, out_dir, version = Path(argv[0]), Path(argv[1]), argv[2]
    out_dir.mkdir(parents=True, exist_ok=True)
    daemon = [("DESCRIPTION", help_text(bin_dir / "gpuplaned"))]
    ctl_top = help_text(bin_dir / "gpuplanectl")
    ctl = [("DESCRIPTION", ctl_top)]
    ctl += command_sections(bin_dir / "gpuplanectl", [], ctl_top)
    for name, sections in (("gpuplaned", daemon), ("gpuplanectl", ctl)):
        # mtime=0: the same help gives the same bytes (reproducible packages).
        with open(out_dir / f"{name}.1.gz", "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                                          compresslevel=9, mtime=0) as gz:
            gz.write(page(name, version, sections).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
