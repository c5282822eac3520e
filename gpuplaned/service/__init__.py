"""The service layer: what the HTTP handlers, MCP's tools and the server-side actors call.

Three jobs live here, each in a subpackage of its own:

- ``api``: the API's operations (jobs, runs, sessions, logs, tokens, ...; ``api.checkpoints``
  and ``api.imports`` for those two families), and the admission of their callers;
- ``link``: the server's half of the node link (``link.nodes``, ``link.agent_link``,
  ``link.registry``), what is read on a node for the server, and the live feeds;
- ``passes``: what the server-side actors run (``passes.dispatch``, ``passes.budget``,
  ``passes.retention``, ...).

Beside them, what all three share: ``context`` (the daemon's capabilities), ``context_state``,
``access`` (the store's ports) and ``sealing`` (secrets at rest). A service takes the daemon context
(``context.ServerContext``) and plain values and raises ``ApiError``; nothing here imports
Quart or ``gpuplaned.http``. It is trio code all the same: it awaits the store's writer and
readers, wakes the scheduler, asks remote agents over their sessions, and times its caches on
trio's clock.
"""
