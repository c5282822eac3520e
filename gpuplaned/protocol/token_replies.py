"""API tokens as the API shows them: never a secret but once, in the reply that made it."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import next_cursor_field
from gpuplaned.protocol.token_limits import TokenLimits

SCOPES = ("read", "write", "agent", "sdk", "admin")  # what a token may do (gpuplaned.service.api.tokens.grants)


@attrs.frozen
class TokenInfo:
    """A token as the API shows it: never its secret, nor the secret's hash. Times are wall-clock ms."""

    id: str = doc("tok_<ULID>")
    name: str
    scopes: tuple[str, ...] = doc(items={"enum": list(SCOPES)})
    created_at: int = doc("ms since the epoch")
    expires_at: int | None = doc("ms since the epoch")
    last_used_at: int | None = doc("ms since the epoch")
    revoked_at: int | None = doc("ms since the epoch")
    limits: TokenLimits | None = doc("an agent token's limits; null: only its scopes limit it", default=None)
    used_gpu_hours: float | None = doc("GPU-hours its jobs have used (listed tokens with a budget)", default=None)
    remaining_gpu_hours: float | None = doc("its budget less what its jobs used and may still use (listed tokens "
                                            "with a budget)", default=None)
    job_id: str | None = doc("the job whose SDK this token is (minted when the job was handed to a Slurm node "
                             "with a server_url, held to that job's runs, revoked when the attempt ends); "
                             "null: a token someone made", default=None)

    __schema_name__ = "Token"  # the API's word for it


@attrs.frozen(kw_only=True)
class TokenCreated:
    token: TokenInfo
    secret: str = doc("shown only in this reply", pattern="^gpp_[0-9A-HJKMNP-TV-Z]{26}_[A-Za-z0-9_-]{43}$")


@attrs.frozen(kw_only=True)
class TokenReply:
    token: TokenInfo


@attrs.frozen(kw_only=True)
class TokenList:
    tokens: list[TokenInfo]
    next_cursor: str | None = next_cursor_field()
