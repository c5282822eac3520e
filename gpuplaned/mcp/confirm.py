"""Confirmation of a destructive tool (cancel_job, remove_job, clean_jobs) by the person behind the agent.

2026-07-28 clients are asked statelessly: the tool answers ``InputRequiredResult`` with an
elicitation, and the client calls again carrying the answer (``input_responses``) and our
``request_state``. 2025-11-25 clients are asked in their session (``asgi``): an elicitation
request in the middle of the call, whose answer the session matches to it. A token marked ``unattended`` is not asked. A
client that cannot be asked is refused, with the ways out named.

``tasks/cancel`` cancels a job too, so it passes here as ``cancel_job`` does (``server``):
asked in a 2025-11-25 session; at 2026-07-28 its answer cannot carry a question (only
``tools/call``, ``prompts/get`` and ``resources/read`` may answer ``InputRequiredResult``),
so there it is refused like a client that cannot be asked, naming ``cancel_job``, which can.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from gpuplaned.protocol.errors import ApiError, ErrorCode

KEY = "confirm"
_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Go ahead?"}},
           "required": ["confirm"]}
_CAN_ASK = types.ClientCapabilities(elicitation=types.ElicitationCapability())


def unattended(caller: Any) -> bool:
    limits = getattr(caller, "limits", None)
    return bool(limits is not None and limits.unattended)


def _declined(what: str) -> ApiError:
    return ApiError(ErrorCode.FORBIDDEN, f"not done: the user did not confirm {what}",
                    {"reason": "declined"})


def _cannot_ask(what: str, why: str, by_hand: str) -> ApiError:
    return ApiError(ErrorCode.FORBIDDEN, f"{what} needs the user's confirmation and this client cannot ask for it "
                                         f"({why}); use a token created with unattended use allowed, or run it "
                                         f"yourself: {by_hand}",
                    {"reason": "confirmation_required", "ways_out": ["unattended token", by_hand]})


def _accepted(answer: Any, what: str) -> None:
    if not isinstance(answer, types.ElicitResult) or answer.action != "accept" or not (answer.content or {}).get(KEY):
        raise _declined(what)


async def confirm(ctx: Any, caller: Any, params: types.CallToolRequestParams, what: str,
                  state: str, *, by_hand: str, asked_by: str | None = None) -> types.InputRequiredResult | None:
    """None: go ahead. An ``InputRequiredResult``: ask first (return it as the tool's answer).

    ``asked_by``: the method when it is not a ``tools/call`` (``tasks/cancel``), whose answer
    cannot be an ``InputRequiredResult``. ``by_hand``: the command the user may type instead
    (named when nobody can be asked).

    Raises:
        ApiError: forbidden when the user declined, or cannot be asked.
    """
    if unattended(caller):
        return None
    responses = params.input_responses or {}
    if KEY in responses:
        if params.request_state != state:
            raise ApiError(ErrorCode.BAD_REQUEST, "a confirmation for another call", {"reason": "request_state"})
        _accepted(responses[KEY], what)
        return None
    can_ask = ctx.session.check_client_capability(_CAN_ASK)
    message = f"An agent asks to {what}. Go ahead?"
    if ctx.protocol_version >= "2026-07-28":
        if not can_ask:
            raise _cannot_ask(what, "it declared no elicitation", by_hand)
        if asked_by is not None:
            raise _cannot_ask(what, f"{asked_by} cannot carry the question at 2026-07-28: call the cancel_job "
                                    f"tool, which asks", by_hand)
        request = types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=_SCHEMA))
        return types.InputRequiredResult(input_requests={KEY: request}, request_state=state)
    if not can_ask:
        raise _cannot_ask(what, "it declared no elicitation", by_hand)
    if not ctx.session.can_send_request:  # no session to carry the question and its answer
        raise _cannot_ask(what, "a 2025-11-25 request outside a session: send initialize first", by_hand)
    _accepted(await ctx.session.elicit_form(message, _SCHEMA, related_request_id=ctx.request_id), what)
    return None
