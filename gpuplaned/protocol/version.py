"""Protocol versions spoken by the daemon and its clients."""

# The port-file format (``protocol=1``); bump only with an incompatible change.
PORTFILE_PROTOCOL = 1
# The control/REST API; clients warn when the daemon reports a different one.
API_VERSION = 1
