"""Protocol versions spoken by the daemon and its clients."""

# The port-file format (``protocol=1``); bump only with an incompatible change.
PORTFILE_PROTOCOL = 1
# The control/REST API; clients warn when the daemon reports a different one.
API_VERSION = 1
# Every response names the API version it speaks, so a client notices a daemon from
# another release without an extra round trip.
API_VERSION_HEADER = "X-GPUPlane-API"


def api_mismatch(announced: str | None) -> str | None:
    """A warning when a daemon announces another API version than this client's; else None."""
    if announced is None or announced == str(API_VERSION):
        return None
    return (f"warning: gpuplaned speaks API version {announced}, this client speaks {API_VERSION}; "
            "upgrade one of them if commands misbehave")
