"""An evaluation's result and its end: the result file as the node reads it (real files: a
good one, bad JSON, not an object, a word for a number, NaN, too big, a FIFO, none), the SDK's
records, and the rule that turns the job's end into the evaluation's."""

from __future__ import annotations

import json
import os

import pytest

from gpuplaned.domain.evaluations import NO_METRICS, command_for, judge, merged, parse_evaluations
from gpuplaned.launching.eval_result import read_result, result_path
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.evaluation_wire import MAX_RESULT_BYTES, EvalResult, parse_result


def _result(tmp_path, content: bytes | str):
    result_path(tmp_path).write_bytes(content.encode() if isinstance(content, str) else content)
    return read_result(tmp_path)


def test_a_result_file_of_numbers_is_the_metrics(tmp_path):
    assert read_result(tmp_path) is None  # none written
    assert _result(tmp_path, json.dumps({"accuracy": 0.91, "top5": 1, "loss": -0.5})) == \
        EvalResult(metrics={"accuracy": 0.91, "top5": 1.0, "loss": -0.5})
    assert _result(tmp_path, "{}") == EvalResult(metrics={})


@pytest.mark.parametrize(("content", "why"), [
    ("{", "the result file is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("[1, 2]", "the result file: must be a JSON object of metric names to numbers, got an array"),
    ('"fine"', "the result file: must be a JSON object of metric names to numbers, got a string"),
    ('{"acc": "high"}', "the result file: metrics.acc: must be a number, got the string 'high'"),
    ('{"acc": true}', "the result file: metrics.acc: must be a number, got a boolean"),
    ('{"acc": {"top1": 0.5}}', "the result file: metrics.acc: must be a number, got an object"),
    ('{"acc": NaN}', "the result file: metrics: acc: must be a finite number, got nan"),
    (b"\xff\xfe", "the result file is not UTF-8 text"),
])
def test_a_bad_result_file_is_named_in_words(tmp_path, content, why):
    found = _result(tmp_path, content)
    assert found.metrics is None
    assert found.error.startswith(why.split(": line")[0]), found.error


def test_a_result_file_too_big_or_not_a_file_is_never_read_whole(tmp_path):
    big = _result(tmp_path, b" " * (MAX_RESULT_BYTES + 1))
    assert big.error == f"the result file is over {MAX_RESULT_BYTES} bytes ({MAX_RESULT_BYTES + 1})"
    os.remove(result_path(tmp_path))
    os.mkfifo(result_path(tmp_path))  # nobody writes it: reading must not wait for a writer
    assert read_result(tmp_path) == EvalResult(error="the result file is not a regular file")
    assert parse_result(b"x" * (MAX_RESULT_BYTES + 1)).error == f"the result file is over {MAX_RESULT_BYTES} bytes"


def test_the_evaluation_follows_its_job():
    good = EvalResult(metrics={"acc": 0.9})
    assert judge("SUCCEEDED", good, {}).status == "SUCCEEDED" and judge("SUCCEEDED", good, {}).metrics == {"acc": 0.9}
    assert judge("SUCCEEDED", None, {"acc": 0.5}).status == "SUCCEEDED"  # the SDK's only
    assert judge("SUCCEEDED", None, {}) == judge("SUCCEEDED", EvalResult(metrics={}), {})
    assert judge("SUCCEEDED", None, {}).error == NO_METRICS
    bad = EvalResult(error="the result file is not JSON: ...")
    assert (judge("SUCCEEDED", bad, {"acc": 0.5}).status, judge("SUCCEEDED", bad, {}).error) == \
        ("FAILED", "the result file is not JSON: ...")  # the file's fault wins over the SDK's metrics
    failed = judge("FAILED", good, {}, failure_reason="EXIT_CODE", failure_message="exit code 3")
    assert (failed.status, failed.error, failed.metrics) == \
        ("FAILED", "the evaluation job failed (EXIT_CODE): exit code 3", {"acc": 0.9})
    assert judge("CANCELLED", None, {}).status == "CANCELLED" and judge("CANCELLED", None, {}).error is None


def test_the_command_gets_the_checkpoints_path_and_the_sdk_records_are_checked():
    assert command_for(["python", "eval.py", "--ckpt={checkpoint}", "{checkpoint}"], "/m/a.pt") == \
        ["python", "eval.py", "--ckpt=/m/a.pt", "/m/a.pt"]
    records = parse_evaluations([{"metrics": {"acc": 0.5}}, {"metrics": {"acc": 0.7, "f1": 1}, "ts": 5}])
    assert merged(records) == {"acc": 0.7, "f1": 1.0} and parse_evaluations(None) == []
    for bad, field in (([{"metrics": {"acc": "x"}}], "evaluations[0].metrics.acc"), ("no", "evaluations"),
                       ([{"metrics": {}, "extra": 1}], "evaluations[0].extra")):
        with pytest.raises(ApiError) as err:
            parse_evaluations(bad)
        assert err.value.details["field"] == field, err.value.message
