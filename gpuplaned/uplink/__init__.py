"""The agent's uplink to its server, node side (no store): ``spool``, the durable record log
(stdlib only, no trio); ``link``, the node link of role agent over it (trio); ``agent_app``,
what an agent's control socket serves (Quart-Trio). The connection itself is the uplink actor's
(``actors/uplink.py``)."""
