"""The pure part of sweeps (gpuplaned.domain.sweeps): expansion of each kind, the checks that
name the field at fault, and a trial's argv, env and values key."""

from __future__ import annotations

import pytest

from gpuplaned.domain import sweeps
from gpuplaned.protocol.errors import ApiError


def _refused(call, *args) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args)
    return caught.value


def test_a_grid_is_the_cartesian_product_first_name_slowest() -> None:
    trials = sweeps.grid_trials({"lr": [0.1, 0.01], "bs": [32, 64], "opt": ["adam"]})
    assert trials == [
        {"lr": 0.1, "bs": 32, "opt": "adam"},
        {"lr": 0.1, "bs": 64, "opt": "adam"},
        {"lr": 0.01, "bs": 32, "opt": "adam"},
        {"lr": 0.01, "bs": 64, "opt": "adam"},
    ]


@pytest.mark.parametrize(("grid", "field", "words"), [
    ({"lr": []}, "grid.lr", "non-empty list"),
    ({"lr": 0.1}, "grid.lr", "non-empty list"),
    ({"lr": [0.1, 0.1]}, "grid.lr", "0.1 is given twice"),
    ({"lr": [None]}, "grid.lr", "got null"),
    ({"lr": [float("inf")]}, "grid.lr", "not a finite number"),
    ({"lr": [[1]]}, "grid.lr", "got a list"),
    ({"1lr": [1]}, "grid.1lr", "not a parameter name"),
    ({"lr": [1], "LR": [2]}, "grid.LR", "differ only in case"),
    ({"trial": [1]}, "grid.trial", "GPUPLANE_SWEEP_TRIAL"),
    ({"Id": [1]}, "grid.Id", "GPUPLANE_SWEEP_ID"),
    ({}, "grid", "must map"),
])
def test_a_bad_grid_is_refused_naming_the_field(grid, field, words) -> None:
    error = _refused(sweeps.grid_trials, grid)
    assert error.details["field"] == field
    assert error.message.startswith(f"{field}: ")
    assert words in error.message


def test_a_grid_beyond_the_limit_is_refused_with_its_size() -> None:
    error = _refused(sweeps.grid_trials, {"a": list(range(101)), "b": list(range(100))})
    assert "101 x 100 = 10100 trials; at most 10000" in error.message


def test_a_random_sweep_is_the_same_for_the_same_seed_and_within_its_bounds() -> None:
    spec = {"lr": "log:1e-5:1e-1", "dropout": "uniform:0:0.5", "opt": "choice:adam,sgd", "layers": "int:2:8"}
    first = sweeps.random_trials(spec, 50, 7)
    assert first == sweeps.random_trials(spec, 50, 7)
    assert first != sweeps.random_trials(spec, 50, 8)
    assert first[:20] == sweeps.random_trials(spec, 20, 7)  # more trials later: the first ones again
    assert len({sweeps.values_key(v) for v in first}) == 50
    for values in first:
        assert list(values) == ["lr", "dropout", "opt", "layers"]
        assert 1e-5 <= values["lr"] <= 1e-1
        assert 0 <= values["dropout"] <= 0.5
        assert values["opt"] in ("adam", "sgd")
        assert isinstance(values["layers"], int) and 2 <= values["layers"] <= 8
        assert values["lr"] == float(f"{values['lr']:.6g}")  # 6 significant digits


def test_a_random_sweep_of_few_choices_gives_no_duplicate() -> None:
    trials = sweeps.random_trials({"opt": "choice:adam,sgd", "bs": "choice:32,64"}, 10, 0)
    assert sorted(sweeps.values_key(v) for v in trials) == sorted(
        sweeps.values_key({"opt": o, "bs": b}) for o in ("adam", "sgd") for b in (32, 64))


def test_a_log_draw_spans_its_decades() -> None:
    drawn = [v["lr"] for v in sweeps.random_trials({"lr": "log:1e-6:1"}, 400, 3)]
    assert min(drawn) < 1e-4 and max(drawn) > 1e-2  # uniform in the log, not in the value


@pytest.mark.parametrize(("text", "words"), [
    ("normal:0:1", "not a distribution"),
    ("uniform:1", "two numbers"),
    ("uniform:a:b", "two numbers"),
    ("uniform:2:1", "LO must be below HI"),
    ("log:0:1", "LO > 0"),
    ("int:1.5:3", "two integers"),
    ("choice:a,a", "differ"),
    ("choice:a,", "non-empty"),
    (3, "must be a string"),
])
def test_a_bad_distribution_is_refused_naming_the_parameter(text, words) -> None:
    error = _refused(sweeps.random_trials, {"lr": text}, 3, 0)
    assert error.details["field"] == "random.lr"
    assert words in error.message


def test_a_random_sweep_needs_its_trials() -> None:
    assert _refused(sweeps.random_trials, {"lr": "uniform:0:1"}, 0, 0).details["field"] == "trials"


def test_a_list_is_taken_as_given_and_checked_trial_by_trial() -> None:
    given = [{"lr": 0.1, "opt": "adam"}, {"opt": "sgd", "lr": 0.2}]
    assert sweeps.list_trials(given) == given
    error = _refused(sweeps.list_trials, [{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.1}])
    assert error.details["field"] == "trials_list[2]" and "the same values as trials_list[0]" in error.message
    error = _refused(sweeps.list_trials, [{"lr": 0.1}, {"bs": 2}])
    assert error.details["field"] == "trials_list[1]" and "same parameters" in error.message
    assert _refused(sweeps.list_trials, [{"lr": {"a": 1}}]).details["field"] == "trials_list[0].lr"


def test_expand_reads_the_stored_parameters_of_each_kind() -> None:
    assert sweeps.expand("grid", {"grid": {"a": [1, 2]}}) == [{"a": 1}, {"a": 2}]
    assert sweeps.expand("list", {"trials_list": [{"a": True}]}) == [{"a": True}]
    assert sweeps.expand("random", {"random": {"a": "int:0:100"}, "trials": 3, "seed": 5}) == \
        sweeps.random_trials({"a": "int:0:100"}, 3, 5)


def test_values_key_is_canonical() -> None:
    assert sweeps.values_key({"b": 1, "a": 0.5}) == sweeps.values_key({"a": 0.5, "b": 1}) == '{"a":0.5,"b":1}'
    assert sweeps.values_key({"a": 1}) != sweeps.values_key({"a": 1.0}) != sweeps.values_key({"a": True})


def test_a_trials_argv_has_its_values_and_leaves_other_braces() -> None:
    argv = ["python", "train.py", "--lr", "{lr}", "--tag={opt}-{bs}", "{other}", "{", "{}", "--amp", "{amp}"]
    got = sweeps.trial_argv(argv, {"lr": 1e-05, "opt": "adam", "bs": 32, "amp": False})
    assert got == ["python", "train.py", "--lr", "1e-05", "--tag=adam-32", "{other}", "{", "{}", "--amp", "false"]


def test_a_trials_env() -> None:
    assert sweeps.trial_env({"lr": 0.1, "use_amp": True}, "swp_X", 3) == {
        "GPUPLANE_SWEEP_LR": "0.1", "GPUPLANE_SWEEP_USE_AMP": "true",
        "GPUPLANE_SWEEP_ID": "swp_X", "GPUPLANE_SWEEP_TRIAL": "3"}


@pytest.mark.parametrize(("text", "value"), [
    ("0.1", 0.1), ("32", 32), ("-2", -2), ("1e-5", 1e-5), ("true", True), ("false", False), ("adam", "adam"),
    ("nan", "nan"), ("", ""),
])
def test_a_command_line_value_is_typed(text, value) -> None:
    got = sweeps.parse_scalar(text)
    assert got == value and type(got) is type(value)


def test_worst_case_gpu_hours() -> None:
    assert sweeps.worst_case_gpu_hours(100, 2, 1800) == 100.0
    assert sweeps.worst_case_gpu_hours(100, 2, None) is None
