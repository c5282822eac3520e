"""A token or browser session keeps at most ``MAX_VIEWS_EACH`` views (a read scope may make them,
so the cap is what keeps one from filling the disk): one more is a 409 naming the cap, the same
state again still answers its view, deleting one makes room, and the local socket has no cap."""

from __future__ import annotations

import pytest
from inprocess import passes_by_hand

from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api import views
from gpuplaned.service.api.ui_sessions import Caller
from gpuplaned.service.api.views import ViewCreate

READER = Caller("token", ("read",), None, "tok_reader", "token 'reader'", token_id="tok_reader")


def body(n: int) -> ViewCreate:
    return structure({"state": f"e=exp_{n}", "page": "experiments"}, ViewCreate)


async def test_a_callers_views_are_capped_and_deleting_one_makes_room(tmp_path, nursery, monkeypatch):
    monkeypatch.setattr(views, "MAX_VIEWS_EACH", 3)
    async with passes_by_hand(tmp_path, nursery) as ctx:
        made = [(await views.create_view(ctx, body(n), READER))[0].view for n in range(3)]
        with pytest.raises(ApiError) as refused:
            await views.create_view(ctx, body(3), READER)
        assert refused.value.code == ErrorCode.CONFLICT and refused.value.details == {"limit": 3, "views": 3}
        assert "delete some" in refused.value.message
        again, new = await views.create_view(ctx, body(0), READER)  # the same state: its view, no new one
        assert (again.view.id, new) == (made[0].id, False)
        await views.delete_view(ctx, made[1].id, READER)
        assert (await views.create_view(ctx, body(3), READER))[1] is True
        for n in range(4, 8):  # the local socket (the user) has no cap
            assert (await views.create_view(ctx, body(n), None))[1] is True
