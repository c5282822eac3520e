"""The rules behind what is hidden (gpuplaned.domain.secret_values), what the audit log keeps of a
job's env and argv (gpuplaned.service.api.audit.redact), and how `job submit` builds a body's
``secret_env`` from ``--secret-env`` and a job file's ``[secrets]`` (gpuplanectl.submission)."""

from __future__ import annotations

import pytest

from gpuplaned.domain.secret_values import looks_secret, mask_url_passwords
from gpuplaned.service.api.audit import REDACTED, redact
from gpuplanectl.submission import JobFileError, SubmissionError, build_body, load_job_file


@pytest.mark.parametrize("name", ["DB_PASS", "AUTH_HEADER", "db_password", "PGPASSWORD", "MYSQL_PASSWD", "API_KEY",
                                  "WANDB_API_KEY", "HF_TOKEN", "GITHUBTOKEN", "AWS_SECRET_ACCESS_KEY", "PRIVATE_KEY",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "SENTRY_DSN", "basic-auth", "APIKEY",
                                  "SSH_PASSPHRASE", "session.cookie"])
def test_names_that_name_a_credential_look_secret(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["PATH", "PWD", "LR", "EPOCHS", "PASSAGES", "KEYBOARD_LAYOUT", "AUTHOR",
                                  "DATABASE_URL", "SSL_CERT_FILE", "GPUPLANE_CKPT_DIR", "MONKEY"])
def test_ordinary_names_do_not(name):
    assert not looks_secret(name)


@pytest.mark.parametrize(("text", "shown"), [
    ("postgres://trainer:pw@db.lan/runs", "postgres://trainer:***@db.lan/runs"),
    ("--db=mysql://u:p@ss@h:3306/x?ssl=1", "--db=mysql://u:***@h:3306/x?ssl=1"),  # the last @ ends it
    ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
    ("a=postgres://u:x@h b=amqp://v:y@q", "a=postgres://u:***@h b=amqp://v:***@q"),
    ("https://user@example.com/path", "https://user@example.com/path"),  # no password
    ("https://example.com/a:b@c", "https://example.com/a:b@c"),  # not in the authority
    ("user:pw@host", "user:pw@host"),  # no scheme: not a URL
])
def test_url_passwords_are_masked(text, shown):
    assert mask_url_passwords(text) == shown


def test_the_audit_log_keeps_env_names_and_no_value():
    arguments = {"body": {"command": ["python", "t.py", "--db=postgres://u:pw@h/x"],
                          "env": {"LR": "0.1", "DATABASE_URL": "postgres://u:pw@h/x", "DB_PASS": "p"},
                          "secret_env": {"HF_KEY": "k"}, "on_oom": {"env": {"BATCH": "half"}}}}
    assert redact(arguments) == {"body": {
        "command": ["python", "t.py", "--db=postgres://u:***@h/x"],
        "env": {"LR": REDACTED, "DATABASE_URL": REDACTED, "DB_PASS": REDACTED},
        "secret_env": {"HF_KEY": REDACTED}, "on_oom": {"env": {"BATCH": REDACTED}}}}


def test_secret_env_from_the_file_and_the_flags(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('command = "python t.py"\n[env]\nLR = "0.1"\nDB_PASS = "old"\n[secrets]\nHF_KEY = "f"\n'
                   'DB_USER_PASS = "file"\n')
    body = build_body(load_job_file(job), {"secret_env": ["DB_USER_PASS=flag", "DB_PASS", "TOKEN_X=a=b"]},
                      environ={"DB_PASS": "from-shell", "PATH": "/bin"}, cwd=str(tmp_path))
    assert body["secret_env"] == {"HF_KEY": "f", "DB_USER_PASS": "flag", "DB_PASS": "from-shell", "TOKEN_X": "a=b"}
    assert body["env"] == {"PATH": "/bin", "LR": "0.1"}  # a secret of the same name wins over a plain one
    plain = build_body({"command": ["x"]}, {}, environ={}, cwd=str(tmp_path))
    assert "secret_env" not in plain


def test_bad_secret_env_names_the_flag_or_the_key(tmp_path):
    with pytest.raises(SubmissionError, match=r"--secret-env DB_PASS: not set in this shell") as caught:
        build_body({"command": ["x"]}, {"secret_env": ["DB_PASS"]}, environ={}, cwd=str(tmp_path))
    assert caught.value.field == "secret_env"
    with pytest.raises(SubmissionError, match=r"--secret-env '=v': expected NAME=VALUE or NAME"):
        build_body({"command": ["x"]}, {"secret_env": ["=v"]}, environ={}, cwd=str(tmp_path))
    job = tmp_path / "job.toml"
    job.write_text('command = "x"\n[secrets]\nDB_PASS = 3\n')
    with pytest.raises(JobFileError, match=r"job.toml: secrets.DB_PASS: must be a string, not an integer"):
        load_job_file(job)
