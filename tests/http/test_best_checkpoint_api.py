"""An experiment's best checkpoint through a real daemon (``GET /api/v1/experiments/{id}/best-checkpoint``
and ``gpuplanectl checkpoints best``): two runs of one experiment sending metrics and checkpoints
in SDK batches, ranked by the metric at each checkpoint's step; a NaN value never best; a best
whose file is deleted, or changed in size, is skipped for the next one."""

from __future__ import annotations

import json
import math
import os

import jsonschema
import pytest

from gpuplaned.checkpoints.files import fingerprint
from gpuplaned.http import openapi
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api.checkpoints.best import why_not_present
from gpuplaned.store.checkpoint_rows import Checkpoint

pytestmark = pytest.mark.e2e


def _run(api, tmp_path, name: str, losses: dict[int, float]) -> tuple[str, dict[int, str]]:
    """A run of experiment p/e with ``val/loss`` at the given steps and a real file checkpointed at each."""
    opened = api.post("/api/v1/sessions", {"name": name, "project": "p", "experiment": "e"})
    steps = sorted(losses)
    paths = {}
    for step in steps:
        path = tmp_path / f"{name}-{step}.pt"
        path.write_bytes(os.urandom(100 + step))
        paths[step] = str(path)
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches", {"seq": 0, "metrics": {
        "val/loss": {"step": steps, "ts": [1_000 + s for s in steps], "value": [losses[s] for s in steps]}},
        "checkpoints": [{"path": paths[s], "step": s, "size_bytes": 100 + s} for s in steps]})
    return opened["run_id"], paths


def _experiment_id(api) -> str:
    return api.get("/api/v1/projects/p/experiments")["experiments"][0]["id"]


def _fits_its_schema(body: dict) -> None:
    """The reply is what the OpenAPI document says of it (its components resolve from the root)."""
    jsonschema.Draft202012Validator({"$ref": "#/components/schemas/BestCheckpoint",
                                     "components": openapi.document()["components"]}).validate(body)


def _refused(api, path: str) -> ApiError:
    with pytest.raises(ApiError) as err:
        api.get(path)
    return err.value


def test_the_best_across_runs_with_its_file_present(daemon, tmp_path):
    api = daemon.client()
    run_a, files_a = _run(api, tmp_path, "a", {10: 0.9, 20: 0.4, 30: math.nan})
    run_b, files_b = _run(api, tmp_path, "b", {10: 0.7, 20: 0.3, 30: 0.5})
    exp = _experiment_id(api)
    url = f"/api/v1/experiments/{exp}/best-checkpoint"

    best = api.get(f"{url}?metric=val/loss")
    assert (best["run_id"], best["checkpoint"]["path"], best["metric_value"]) == (run_b, files_b[20], 0.3)
    assert (best["metric"], best["direction"], best["skipped"], best["experiment_id"]) == \
        ("val/loss", "minimize", [], exp)
    assert best["checkpoint"]["step"] == 20 and best["checkpoint"]["best"] is True
    _fits_its_schema(best)
    by_name = api.get("/api/v1/experiments/e/best-checkpoint?project=p&metric=val/loss")
    assert by_name["checkpoint"]["id"] == best["checkpoint"]["id"]

    os.remove(files_b[20])  # deleted: the next best, from the other run
    second = api.get(f"{url}?metric=val/loss")
    assert (second["run_id"], second["checkpoint"]["path"]) == (run_a, files_a[20])
    assert second["skipped"] == [{"checkpoint_id": best["checkpoint"]["id"], "reason": "gone"}]
    with open(files_a[20], "ab") as f:  # grown since it was registered
        f.write(b"more")
    third = api.get(f"{url}?metric=val/loss")
    _fits_its_schema(third)
    assert third["checkpoint"]["path"] == files_b[30] and third["metric_value"] == 0.5  # never a's NaN at 30
    assert [s["reason"] for s in third["skipped"]] == ["gone", "size 124 is not the registered 120"]

    api.request("PATCH", "/api/v1/metric-definitions/val/loss", {"direction": "maximize"})
    assert api.get(f"{url}?metric=val/loss")["checkpoint"]["path"] == files_a[10]  # 0.9; NaN is not "largest"

    for name in files_a.values():
        os.remove(name)
    for step in (10, 30):
        os.remove(files_b[step])
    gone = _refused(api, f"{url}?metric=val/loss")
    assert gone.code == ErrorCode.NOT_FOUND and "5 skipped" in gone.message


def test_refusals_name_what_is_missing(daemon, tmp_path):
    api = daemon.client()
    _run(api, tmp_path, "a", {10: 0.9})
    url = f"/api/v1/experiments/{_experiment_id(api)}/best-checkpoint"
    unset = _refused(api, url)  # no primary metric anywhere
    assert unset.code == ErrorCode.BAD_REQUEST and unset.details["field"] == "metric"
    api.request("PATCH", "/api/v1/metric-definitions/val/loss", {"direction": "none"})
    aimless = _refused(api, f"{url}?metric=val/loss")
    assert aimless.code == ErrorCode.CONFLICT and "direction is needed" in aimless.message
    assert _refused(api, f"{url}?metric=never/logged").code == ErrorCode.CONFLICT
    api.request("PATCH", "/api/v1/metric-definitions/val/loss", {"direction": "minimize"})
    api.request("PUT", "/api/v1/primary-metric", {"metric": "val/loss", "experiment": "e", "project": "p"})
    assert api.get(url)["metric"] == "val/loss"  # the experiment's primary metric by default
    for missing in ("/api/v1/experiments/exp_nope/best-checkpoint", "/api/v1/experiments/e/best-checkpoint",
                    "/api/v1/experiments/e/best-checkpoint?project=nope"):
        assert _refused(api, missing).code == ErrorCode.NOT_FOUND, missing
    empty = api.post("/api/v1/projects/p/experiments", {"name": "empty"})["experiment"]["id"]
    assert _refused(api, f"/api/v1/experiments/{empty}/best-checkpoint?metric=val/loss").code == ErrorCode.NOT_FOUND


def test_gpuplanectl_checkpoints_best(daemon, tmp_path):
    api = daemon.client()
    run_a, files = _run(api, tmp_path, "a", {10: 0.9, 20: 0.4})
    os.remove(files[20])
    result = daemon.run_ctl("checkpoints", "best", "e", "--project", "p", "--metric", "val/loss")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["run:", run_a] and lines[2].split() == ["path:", files[10]]
    assert "val/loss:" in lines[5] and lines[5].split()[1:] == ["0.9", "(minimize)"]
    assert lines[-1].startswith("skipped ck_") and lines[-1].endswith(": gone")
    as_json = json.loads(daemon.run_ctl("checkpoints", "best", _experiment_id(api), "--metric", "val/loss",
                                        "--json").stdout)
    assert as_json["checkpoint"]["path"] == files[10]
    unset = daemon.run_ctl("checkpoints", "best", _experiment_id(api))
    assert unset.returncode == 2 and "metric" in unset.stderr  # a 400: a usage error
    assert daemon.run_ctl("checkpoints", "best").returncode == 2
    assert daemon.run_ctl("checkpoints", run_a, "e").returncode == 2


def test_a_watcher_fingerprint_sees_a_rewrite_of_the_same_size(tmp_path):
    path = tmp_path / "w.pt"
    path.write_bytes(b"x" * 4096)
    ck = Checkpoint("ck_1", "run_1", 1, None, str(path), 4096, {}, 1, fingerprint(str(path)))
    assert why_not_present(ck) is None
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # same size, another mtime
    assert why_not_present(ck) == "changed since it was found (fingerprint)"
    assert why_not_present(Checkpoint("ck_2", "run_1", 1, None, str(tmp_path / "no"), None, {}, 1)) == "gone"
