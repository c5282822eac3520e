"""A job's own SDK token, for the jobs of a node that cannot reach the control socket (issue 32
item 5).

A Slurm node runs its jobs on compute hosts that need not be the daemon's, where the Unix control
socket (and the ancestry check that confines a job's process on it, ``confined_callers``) is out
of reach. A pooled node whose hello says where its jobs reach this daemon's HTTP front
(``Hello.sdk_server``: its ``[slurm] server_url``) gets, with each dispatch, ``GPUPLANE_SERVER``
and a fresh ``GPUPLANE_TOKEN`` in the job's env, which the SDK tries before the control socket.

The token:

- has the ``sdk`` scope and names its job (``api_tokens.job_id``), so the HTTP front holds it as a
  job's process is held on the control socket: the SDK's routes alone (its sessions, its run's
  summary), on its own job's runs and the runs it creates; never another run, a token or a submit;
- is minted in the scheduling pass's transaction that records the dispatch, once the job's
  earlier tokens are revoked: a retry's token is fresh and the old one dead;
- is revoked in the transaction that records the attempt's end (``job_rows.apply_status``,
  ``job_rows.fail_dispatch``), and expires anyway ``lifetime_ms`` after its dispatch, should the
  end never be recorded (a LOST job, which may run on, keeps it until then);
- is stored as its secret's hash only, like every token; the plaintext travels in the dispatch's
  env, which no log shows (``JobSpecWire.env``'s repr is its names), to the node's spec file (0600).
"""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.agent import JobSpecWire
from gpuplaned.protocol.ids import new_id
from gpuplaned.service.api.tokens import new_secret
from gpuplaned.store import node_rows, token_rows
from gpuplaned.store.job_rows import Dispatched
from gpuplaned.store.token_rows import TokenRow

SCOPES = ("sdk",)
SERVER_VAR = "GPUPLANE_SERVER"  # what the SDK reads first (sdk/gpuplane/_endpoint.py)
TOKEN_VAR = "GPUPLANE_TOKEN"
# A job with no timeout: its token lasts this long at most.
UNTIMED_S = 30 * 86_400
# A timeout counts from the job's start, but a Slurm job may first wait in Slurm's queue.
QUEUE_WAIT_S = 86_400


def token_name(job: JobSpecWire) -> str:
    """What ``token list`` and the audit log call it. A ':' no ``token create`` name may hold, so
    no user's token can take it."""
    return f"job:{job.job_id}:attempt-{job.attempt}"


def lifetime_ms(job: JobSpecWire) -> int:
    """How long after its dispatch the token expires if its end is never recorded: the job's
    timeout and stop grace, and a day of waiting in Slurm's queue; ``UNTIMED_S`` with no timeout."""
    if job.timeout_s is None:
        return UNTIMED_S * 1000
    return round((job.timeout_s + job.stop_grace_s + QUEUE_WAIT_S) * 1000)


def give_tokens(conn: Any, dispatched: list[Dispatched], now_ms: int) -> list[Dispatched]:
    """``dispatched`` (a pass's, in its transaction), each one to a node with an SDK server
    carrying ``GPUPLANE_SERVER`` and a new token of its job in its env."""
    servers = node_rows.sdk_servers(conn, (item.node_id for item in dispatched)) if dispatched else {}
    if not servers:
        return dispatched
    return [mint(conn, item, servers[item.node_id], now_ms) if item.node_id in servers else item
            for item in dispatched]


def mint(conn: Any, item: Dispatched, server_url: str, now_ms: int) -> Dispatched:
    """The dispatch with a new token of its job in its env (``server_url``: where the job sends it);
    the job's earlier tokens are revoked first."""
    job = item.job
    token_rows.revoke_job_tokens(conn, job.job_id, now_ms)
    token_id = new_id("tok")
    plaintext, secret_hash = new_secret(token_id)
    token_rows.insert_token(conn, TokenRow(token_id, token_name(job), secret_hash, SCOPES, now_ms,
                                           now_ms + lifetime_ms(job), None, None, job_id=job.job_id))
    env = job.env | {SERVER_VAR: server_url, TOKEN_VAR: plaintext}
    return attrs.evolve(item, job=attrs.evolve(job, env=env))
