"""Routes of views: a UI page's URL state under a short id (issue 33 item 1).

- ``POST /api/v1/views`` ``{"state", "name"?, "page"?}`` -> 201 ``{"view"}`` (200 with the same
  view when the same page, name and state were posted before). A read scope may (sharing a link
  is reading: ``gpuplaned.http.scopes.READ_RULES``); the state is at most 64 KiB.
- ``GET /api/v1/views?saved=true&page=`` (newest first), ``GET /api/v1/views/{id}``.
- ``DELETE /api/v1/views/{id}``: a write scope any view; a read scope the views it created.

The web UI's ``/v/<id>`` is its own page (``gpuplaned.http.ui_routes``), which reads the view
here and shows its full state in the address bar. Semantics live in ``gpuplaned.service.api.views``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, g
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.view_replies import ViewList, ViewReply
from gpuplaned.service.api import views
from gpuplaned.service.api.views import ViewCreate, ViewsQuery

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

api = Routes("views")
_VIEW = Param("view_id", "the view's id (the short link's /v/<id>)")

CREATE = api.post("/api/v1/views", "createView", "Keep a page's URL state under a short id (a short link, or a "
                                                 "saved view with a name)",
                  Reply(201, ViewReply, "The new view."), errors=(400, 409, 413), body=ViewCreate,
                  also=(Reply(200, ViewReply, "The same page, name and state were posted before: that view."),),
                  description="The state is at most 64 KiB of UTF-8 (400 naming the limit beyond); a token or browser "
                              "session keeps at most 1,000 views (409 beyond: delete some). A read scope "
                              "may create views: sharing a link is reading.")
LIST = api.get("/api/v1/views", "listViews", "Views, newest first", Reply(200, ViewList, "The views."),
               errors=(400,), query=ViewsQuery)
GET = api.get("/api/v1/views/<view_id>", "getView", "One view", Reply(200, ViewReply, "The view."), errors=(404,),
              params=(_VIEW,))
DELETE = api.delete("/api/v1/views/<view_id>", "deleteView", "Delete a view",
                    Reply(200, ViewReply, "The deleted view."), errors=(403, 404), params=(_VIEW,),
                    description="A write scope deletes any view; a read scope only the views it created (403 "
                                "for another's).")


def register(app: QuartTrio, shared: ServerContext) -> None:
    @CREATE.on(app)
    async def create_view(body: ViewCreate) -> Response:
        reply, new = await views.create_view(shared, body, getattr(g, "caller", None))
        return ok(reply, 201 if new else 200)

    @LIST.on(app)
    async def list_views(query: ViewsQuery) -> Response:
        return ok(await views.list_views(shared, query))

    @GET.on(app)
    async def get_view(view_id: str) -> Response:
        return ok(await views.get_view(shared, view_id))

    @DELETE.on(app)
    async def delete_view(view_id: str) -> Response:
        return ok(await views.delete_view(shared, view_id, getattr(g, "caller", None)))
