"""The service layer: what the HTTP handlers, MCP's tools and the server-side actors call.

Three jobs live here: the API's operations (jobs, runs, tokens, ...), the server's half of the
node link (``nodes``, ``agent_link``, ``registry``), and the passes the server-side actors run
(``dispatch``, ``budget_pass``, ``retention``, ...). A service takes the daemon context
(``context.ServerContext``) and plain values and raises ``ApiError``; nothing here imports
Quart or ``gpuplaned.http``. It is trio code all the same: it awaits the store's writer and
readers, wakes the scheduler, asks remote agents over their sessions, and times its caches on
trio's clock.
"""
