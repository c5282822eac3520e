"""The uplink's replay in batches, without a network: the ``[uplink]`` keys that pace it and
bound the backoff, the pacer, and the ``records`` frame the agent builds from spooled text,
as the server's frame reader takes it."""

from __future__ import annotations

import json

import pytest

from gpuplaned.actors.uplink import Pacer, _tail_batch, records_frame
from gpuplaned.config import ConfigError, UplinkConfig, load_config
from gpuplaned.protocol.uplink_frames import MAX_BATCH_BYTES, Records
from gpuplaned.service.link.agent_link import _metric_columns, read_frame
from gpuplaned.uplink.link import LiveTail
from gpuplaned.uplink.spool import Spool


def _load(tmp_path, text: str):
    path = tmp_path / "gpuplaned.toml"
    path.write_text(text)
    return load_config({"config": str(path)}, {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run")})


def test_the_replay_defaults_replay_a_million_small_records_within_two_seconds():
    cfg = UplinkConfig()
    assert cfg.reconnect_max_s == 30.0
    assert 1_000_000 / cfg.replay_records_per_s <= 2.0
    assert 1_000_000 * 100 / cfg.replay_bytes_per_s <= 2.0  # a one-point metrics body is ~100 bytes


def test_the_keys_are_settable_and_checked(tmp_path):
    cfg = _load(tmp_path, "[uplink]\nreconnect_max_s = 5\nreplay_bytes_per_s = 1000\n").uplink
    assert cfg.reconnect_max_s == 5 and cfg.replay_bytes_per_s == 1000
    for text, key in (("reconnect_max_s = 0.1", "uplink.reconnect_max_s"),
                      ("replay_bytes_per_s = 0", "uplink.replay_bytes_per_s")):
        with pytest.raises(ConfigError, match=key):
            _load(tmp_path, f"[uplink]\n{text}\n")


def test_the_pacer_holds_records_and_bytes_to_their_rates():
    pacer = Pacer(1000, 10_000)
    assert pacer.delay(0.0, 100, 100) == pytest.approx(0.1)  # records bind
    assert pacer.delay(0.1, 100, 5000) == pytest.approx(0.41)  # then bytes: 5,100 at 10,000/s, from 0
    idle = Pacer(1000)
    idle.delay(0.0, 10)
    assert idle.delay(5.0, 10) == pytest.approx(0.01)  # an idle spell banks at most a second


def test_a_frame_built_from_spooled_text_is_what_the_server_reads(tmp_path):
    with Spool(tmp_path, max_bytes=1 << 30, max_age_s=86_400) as spool:
        for i in range(3):
            spool.append("metrics", {"type": "sys_metrics", "seq": 100 + i, "points": [["cpu.util", 1000 + i, i]]})
        [(stream, seqs, bodies)] = list(spool.unacked_batches({}, 100, MAX_BATCH_BYTES))
    frame = read_frame(records_frame(stream, seqs, bodies))
    assert frame == Records("metrics", (1, 2, 3), tuple(
        {"type": "sys_metrics", "seq": 100 + i, "points": [["cpu.util", 1000 + i, i]]} for i in range(3)))
    assert _metric_columns(frame.bodies) == {"cpu.util": {"ts": [1000, 1001, 1002], "value": [0.0, 1.0, 2.0]}}


@pytest.mark.parametrize("body", [
    {"type": "sys_metrics", "seq": 1, "points": [["a", 1, True]]},  # a bool is no value
    {"type": "sys_metrics", "seq": 1, "points": [["a", 1.5, 1.0]]},  # a ts is an integer
    {"type": "sys_metrics", "seq": 1, "points": [["a", 1]]},
    {"type": "sys_metrics", "seq": "1", "points": []},
    {"type": "sys_metrics", "seq": 1, "points": [], "more": 1},
    {"type": "job_status", "seq": 1, "points": []},
    ["not", "an", "object"],
])
def test_a_body_not_plainly_sys_metrics_takes_the_checked_way(body):
    good = {"type": "sys_metrics", "seq": 1, "points": [["a", 1, 2.0]]}
    assert _metric_columns([good]) is not None
    assert _metric_columns([good, body]) is None


async def test_the_live_tail_is_batched_by_stream_and_skips_what_was_sent():
    tail = LiveTail()
    for stream, seq in (("logs", 1), ("logs", 2), ("logs", 3), ("status", 1), ("logs", 4)):
        tail.add(stream, seq, {"n": seq})
    cursor = {"logs": 1}
    got = []
    while tail.records:
        stream, seqs, bodies = _tail_batch(tail, cursor)
        got.append((stream, seqs, [json.loads(b) for b in bodies]))
        if seqs:
            cursor[stream] = seqs[-1]
    assert got == [("logs", [2, 3], [{"n": 2}, {"n": 3}]), ("status", [1], [{"n": 1}]), ("logs", [4], [{"n": 4}])]
