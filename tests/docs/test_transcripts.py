"""How the README test reads a transcript and compares a run with it (``transcripts.py``)."""

from __future__ import annotations

from pathlib import Path

from transcripts import Ids, blocks, mask, match

README = """\
Some text.

```console
$ gpuplanectl submit --gpu 0 \\
    -- python train.py
job_01M8N2SJBPP3S9N9ATYBAG436B QUEUED
$ gpuplanectl logs -f job_01M8N2SJBPP3S9N9ATYBAG436B
step 100 loss 0.6853
...
[job job_01M8N2SJBPP3S9N9ATYBAG436B SUCCEEDED, exit code 0]
```

<!-- readme-test: skip it needs a real remote box -->
```sh
ssh gpubox gpuplanectl status   # a comment
gpuplanectl submit --gpu 1 \\
    -- python train.py
```
"""


def test_a_console_block_is_commands_with_their_output_and_markers_come_with_their_block(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text(README)
    console, sh = blocks(path)
    assert (console.lang, console.line, console.marker) == ("console", 3, None)
    steps = console.steps()
    assert [(s.line, s.command) for s in steps] == [
        (4, "gpuplanectl submit --gpu 0 \\\n    -- python train.py"),
        (7, "gpuplanectl logs -f job_01M8N2SJBPP3S9N9ATYBAG436B")]
    assert steps[0].expected == ["job_01M8N2SJBPP3S9N9ATYBAG436B QUEUED"]
    assert sh.skipped == "it needs a real remote box"
    assert list(sh.commands()) == [(15, "ssh gpubox gpuplanectl status   # a comment"),
                                   (16, "gpuplanectl submit --gpu 1      -- python train.py")]


def test_what_varies_is_masked_and_what_does_not_is_compared() -> None:
    assert mask("job_01M94GWE8S73Y4SDRCRHX68C3R QUEUED") == ["<id>", "QUEUED"]
    assert mask("created:  2026-12-06 01:53:35") == ["created:", "<date>"]
    assert mask("box1  ONLINE  attached  1s ago  0  -9 ms") == ["box1", "ONLINE", "attached", "<dur>", "ago", "0",
                                                                 "<dur>"]
    assert mask("up 2m05s, skew +3 ms") == mask("up 12s, skew -9 ms") == ["up", "<dur>,", "skew", "<dur>"]
    assert mask("loss  2000  0.0074153  6.1685e-09  █▅▂▁▁") == ["loss", "2000", "<num>", "<num>", "<spark>"]
    assert mask("gpuplaned (pid 4343) stopped") == ["gpuplaned", "(pid", "<pid>)", "stopped"]
    assert mask("http://127.0.0.1:8765/") == mask("http://127.0.0.1:40123/")
    # Integers and words are not masked: a step, an exit code, a status.
    assert mask("[job x SUCCEEDED, exit code 0]") != mask("[job x FAILED, exit code 0]")
    assert mask("acc 2000 1 323") != mask("acc 2000 1 324")


def test_an_ellipsis_takes_any_lines_and_padding_does_not_matter() -> None:
    expected = ["NAME  STATUS", "a     QUEUED", "...", "end"]
    assert match(expected, ["NAME    STATUS", "a       QUEUED", "end"]) is not None
    assert match(expected, ["NAME STATUS", "a QUEUED", "x", "y", "end", ""]) is not None
    assert match(expected, ["NAME STATUS", "a RUNNING", "end"]) is None
    assert match(expected, ["NAME STATUS", "a QUEUED"]) is None
    assert match(["one"], ["one", "two"]) is None


def test_a_readme_id_stands_for_one_real_id_throughout() -> None:
    ids = Ids()
    assert ids.learn("job_01M8N2SJBPP3S9N9ATYBAG436B QUEUED", "job_01M94GWE8S73Y4SDRCRHX68C3R QUEUED") is None
    assert ids.substitute("gpuplanectl logs -f job_01M8N2SJBPP3S9N9ATYBAG436B") == \
        "gpuplanectl logs -f job_01M94GWE8S73Y4SDRCRHX68C3R"
    assert "was job_01M94GWE8S73Y4SDRCRHX68C3R before" in ids.learn(
        "job_01M8N2SJBPP3S9N9ATYBAG436B", "job_01M94GWYZT1W82A6CYKQ9PEC6N")
    # Two README ids for one real id: the README says they differ, the run says not.
    assert ids.learn("job_01M8N3B0Q5WJ4Z2YH7KD9RT6XE", "job_01M94GWE8S73Y4SDRCRHX68C3R") is not None
    assert ids.learn("run_01M8N2SJBPEZZNVA0B6SFGHBV3", "job_01M94H21XXXTJJ69J0XFQCNKS6") is not None
