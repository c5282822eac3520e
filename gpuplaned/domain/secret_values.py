"""What counts as a secret in what a job is given, and how it is hidden where a job is shown.

One rule for every front (REST, MCP, the CLI and the UI through the API) and for the audit
log:

- ``looks_secret(name)``: a variable whose name holds a word that names a credential
  (``SECRET_WORDS``: ``DB_PASS``, ``AUTH_HEADER``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``...)
  never has its value shown. A name is read as words split on ``_``, ``-`` and ``.``, and
  each word is compared, so ``DB_PASS`` is secret and ``PASSAGES`` or ``KEYBOARD`` are not;
  a word may also end in one (``DBPASSWORD``, ``APIKEY``).
- ``mask_url_passwords(text)``: ``scheme://user:PASSWORD@host`` becomes
  ``scheme://user:***@host`` wherever it sits in a value or an argument
  (``--db=postgres://u:pw@h/db`` too), so ``DATABASE_URL`` shows where it points but not
  its password.

A job's secret env (``--secret-env``, ``[secrets]``) is another matter: its values never
leave the daemon's sealed store except to the job's process (``gpuplaned.service.sealing``).
"""

from __future__ import annotations

import re

MASK = "***"
# Words that name a credential.
# Not PWD (the shell's working directory) nor CERT (SSL_CERT_FILE is a path).
SECRET_WORDS = ("PASS", "PASSWD", "PASSWORD", "PASSPHRASE", "AUTH", "AUTHORIZATION", "CREDENTIAL", "CREDENTIALS",
                "CREDS", "TOKEN", "SECRET", "KEY", "APIKEY", "PRIVATE", "COOKIE", "DSN")
_WORDS = re.compile(r"[_.\-]+")
# A name of one run-on word ending in a credential word: DBPASSWORD, APIKEY, GITHUBTOKEN.
_RUN_ON = re.compile(r"(PASS|PASSWD|PASSWORD|TOKEN|SECRET|APIKEY|CREDENTIALS?)$")
# user:password@ in a URL's authority; the password stops at the last @ before the host.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:]*:)(?P<password>[^\s/?#]*)(?=@)")


def looks_secret(name: str) -> bool:
    """Whether a variable named ``name`` holds a credential, judged by its words."""
    words = [w for w in _WORDS.split(name.upper()) if w]
    return any(w in SECRET_WORDS or w.startswith(("PASSW", "CREDENTIAL", "SECRET", "TOKEN"))
               or _RUN_ON.search(w) for w in words)


def mask_url_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` in it replaced by ``***``."""
    if "://" not in text or "@" not in text:
        return text
    return _URL_PASSWORD.sub(lambda m: m["head"] + MASK, text)
