"""Webhooks: ``gpuplanectl webhook add|list|test|remove``.

``add URL --events T,... [--severity S] [--format ntfy|bark|slack|json] [--secret S]`` subscribes
URL to those event types (``*``: all) at or above the severity; with a secret each body is
signed (``X-GPUPlane-Signature``). The secret is never shown again, nor kept in the database
in the clear. ``list`` shows each subscription with its delivery counts; ``test ID`` sends a
``WEBHOOK_TEST`` notification now and says how the endpoint answered (exit 1 if it did not
take it); ``remove ID`` deletes it with its notifications not yet sent.

``--json`` prints the API's body. Exit 2 for a bad URL, type, severity or format (nothing is
created), 1 for an unknown webhook.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import quote

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

app = typer.Typer(
    name="webhook",
    help="Send events to a URL: ntfy, Bark, Slack or plain JSON, signed with HMAC when a secret is set.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_ID = Annotated[str, typer.Argument(metavar="ID", show_default=False,
                                    help="A webhook's id (wh_...), as `gpuplanectl webhook list` shows it.")]


@app.command("add")
def add(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(metavar="URL", show_default=False, help="Where to POST (http:// or https://).")],
    events: Annotated[str, typer.Option("--events", metavar="TYPE[,TYPE]", show_default=False,
                                        help="Event types to send, e.g. RUN_FINISHED,JOB_FAILED,OOM; * for all.")],
    severity: Annotated[str, typer.Option("--severity", metavar="S",
                                          help="Only events at least this severe: info, warning, critical.")] = "info",
    fmt: Annotated[str, typer.Option("--format", metavar="FORMAT",
                                     help="The body: json, ntfy, bark or slack.")] = "json",
    secret: Annotated[str | None, typer.Option(
        "--secret", metavar="S", show_default=False, envvar="GPUPLANE_WEBHOOK_SECRET",
        help="Sign bodies with HMAC-SHA256 (8+ characters) [env GPUPLANE_WEBHOOK_SECRET, which unlike a flag "
             "does not show in ps].")] = None,
    json_output: JsonOption = False,
) -> None:
    """Subscribe URL to events."""
    body: dict[str, Any] = {"url": url, "events": [t.strip() for t in events.split(",") if t.strip()],
                            "severity": severity.lower(), "format": fmt.lower()}
    if secret:
        body["secret"] = secret
    g = globals_of(ctx)
    with reporting(g, json_output):
        made = connect(g).post("/api/v1/webhooks", body)
    if json_output:
        render.print_json(made)
        return
    hook = made["webhook"]
    print(f"added webhook {hook['id']}: {', '.join(hook['events'])} at {hook['severity']} or above, "
          f"{hook['format']}{', signed' if hook['signed'] else ''}")


@app.command("list")
def list_webhooks(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """List the webhooks: what each sends, and how delivery went. Secrets are never shown."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        hooks = connect(g).get("/api/v1/webhooks")["webhooks"]
    if json_output:
        render.print_json({"webhooks": hooks})
    elif hooks:
        print(webhook_table(hooks))
    else:
        print("no webhooks")


@app.command("test")
def test(ctx: typer.Context, webhook_id: _ID, json_output: JsonOption = False) -> None:
    """Send a test notification now; exit 1 if the endpoint did not take it."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        result = connect(g).post(f"/api/v1/webhooks/{quote(webhook_id, safe='')}/test")["result"]
    if json_output:
        render.print_json({"result": result})
    elif result["delivered"]:
        print(f"delivered (HTTP {result['status']})")
    else:
        render.print_error(f"not delivered: {result['error']}")
    if not result["delivered"]:
        raise typer.Exit(1)


@app.command("remove")
def remove(ctx: typer.Context, webhook_id: _ID, json_output: JsonOption = False) -> None:
    """Remove a webhook, with its notifications not yet sent."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        removed = connect(g).request("DELETE", f"/api/v1/webhooks/{quote(webhook_id, safe='')}")
    if json_output:
        render.print_json(removed)
    else:
        print(f"removed webhook {removed['deleted']['id']}")


def _time(ms: int | None) -> str:
    return render.local_time(ms, "%Y-%m-%d %H:%M")


def webhook_table(hooks: Sequence[Mapping[str, Any]]) -> str:
    rows = [[h["id"], render.printable(h["url"]), ",".join(h["events"]), h["severity"], h["format"],
             "yes" if h["signed"] else "no", str(h["pending"]), str(h["delivered"]), str(h["gave_up"]),
             _time(h.get("last_delivered_at")), render.printable(h.get("last_error") or render.NONE)]
            for h in hooks]
    return render.table(["ID", "URL", "EVENTS", "SEVERITY", "FORMAT", "SIGNED", "PENDING", "SENT", "GAVE UP",
                         "LAST SENT", "LAST ERROR"], rows)
