"""The ``[detector]`` section: every rule on by default, thresholds settable, a bad or unknown
key refused, and the rules' policies made from it."""

from __future__ import annotations

import pytest

from gpuplaned.config import ConfigError, DetectorConfig, load_config
from gpuplaned.service.passes.detector import overfit_policy, stall_policy


def _load(tmp_path, text: str):
    path = tmp_path / "gpuplaned.toml"
    path.write_text(text)
    return load_config({"config": str(path)}, {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run")})


def test_defaults_are_every_rule_on():
    cfg = DetectorConfig()
    assert cfg.loss_nan and cfg.loss_spike and cfg.overfitting and cfg.run_stalled
    assert overfit_policy(cfg).rise == pytest.approx(0.10) and overfit_policy(cfg).evals == 3
    assert stall_policy(cfg).after_ms == 20 * 60 * 1000


def test_settable_from_the_file(tmp_path):
    cfg = _load(tmp_path, "[detector]\nloss_spike = false\noverfit_rise_percent = 25\noverfit_evals = 5\n"
                          "stall_after_s = 90\ninterval_s = 2\n").detector
    assert not cfg.loss_spike and cfg.loss_nan
    assert overfit_policy(cfg).rise == pytest.approx(0.25) and overfit_policy(cfg).evals == 5
    assert stall_policy(cfg).after_ms == 90_000 and cfg.interval_s == 2


@pytest.mark.parametrize("text, message", [("[detector]\nstall_after_s = 0\n", "detector.stall_after_s"),
                                           ("[detector]\noverfit_evals = 0\n", "detector.overfit_evals"),
                                           ("[detector]\nloss_nun = true\n", "unknown key detector.loss_nun")])
def test_a_bad_key_is_refused(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text)
