"""Request bodies: a lone surrogate is refused however it is written, and only a body that
could hold one is walked (a metric batch is not)."""

from __future__ import annotations

import pytest
from unixhttp import BASE_URL

from gpuplaned.http.bodies import _may_hold_surrogates

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("raw", "walked"), [
    (b'{"name": "\\ud800"}', True),
    (b'{"name": "\\uDFFF"}', True),  # either case
    (b'{"name": "\\uDbFf"}', True),
    (b'{"name": "\xed\xa0\x80"}', True),  # the surrogate's own UTF-8 bytes: json.loads passes them through
    (b'{"name": "\\ud83d\\ude00"}', True),  # a pair: walked, and it passes
    (b'{"name": "\\ud7ff \xed\x9f\xbf \\\\ud800"}', True),  # an escaped backslash: walked for nothing, harmless
    (b'{"name": "\\ud7ff \xed\x9f\xbf \\u00e9"}', False),  # the code points just below, other escapes
    (b'{"seq": 0, "metrics": {"loss": {"step": [1], "ts": [2], "value": [0.5]}}}', False),
    ('{"name": "x"}'.encode("utf-16"), True),  # UTF-16 and UTF-32 are always walked
    ('{"name": "x"}'.encode("utf-32"), True),
])
def test_which_bodies_are_walked(raw, walked):
    assert _may_hold_surrogates(raw) is walked


@pytest.mark.parametrize("raw", [
    b'{"name": "\\ud800"}',
    b'{"name": "a\\uDC00b"}',
    b'{"name": "\xed\xa0\x80"}',
    b'{"name": "ok", "tags": ["\\uDBFF"]}',
    '{"name": "\\ud800"}'.encode("utf-16"),
    '{"name": "x", "config": {"\\udfff": 1}}'.encode("utf-8-sig"),
])
def test_a_lone_surrogate_is_refused_however_it_is_written(api_session, raw):
    response = api_session.post(f"{BASE_URL}/api/v1/sessions", data=raw, timeout=10)
    assert response.status_code == 400, response.text
    assert "lone surrogate" in response.json()["error"]["message"]


def test_a_surrogate_pair_and_a_batch_without_escapes_pass(api_session):
    response = api_session.post(f"{BASE_URL}/api/v1/sessions", data=b'{"name": "run \\ud83d\\ude00"}', timeout=10)
    assert response.status_code == 201, response.text
    opened = response.json()
    assert opened["session"]["id"] == opened["session_id"]
    batch = b'{"seq": 0, "metrics": {"loss": {"step": [0, 1], "ts": [1, 2], "value": [0.5, 0.25]}}}'
    stored = api_session.post(f"{BASE_URL}/api/v1/sessions/{opened['session_id']}/batches", data=batch, timeout=10)
    assert stored.status_code == 200 and stored.json()["points"] == 2
    bad = b'{"seq": 1, "metrics": {"loss\\ud800": {"step": [2], "ts": [3], "value": [0.1]}}}'
    refused = api_session.post(f"{BASE_URL}/api/v1/sessions/{opened['session_id']}/batches", data=bad, timeout=10)
    assert refused.status_code == 400 and "lone surrogate" in refused.json()["error"]["message"]
