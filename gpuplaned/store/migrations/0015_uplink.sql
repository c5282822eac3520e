-- Remote agents' uplink (issue 18; gpuplaned.service.agent_link, gpuplaned.store.uplink_rows).

-- Per (node, stream): the highest record seq committed. A record is applied in the same
-- transaction that raises this mark, so a record resent after a reconnect (seq at or below
-- it) changes nothing; hello_ok tells the agent these marks.
CREATE TABLE uplink_streams (
  node_id TEXT NOT NULL,
  stream  TEXT NOT NULL,
  seq     INTEGER NOT NULL,
  PRIMARY KEY (node_id, stream)
) WITHOUT ROWID;

-- uplink: the node said hello over the agent WebSocket (1), or is a role-all daemon's own
-- node (0): only the first kind is judged by its heartbeats (OFFLINE, jobs LOST). agent_id: the
-- agent's own stable id (its state file); a hello for a node whose link is still attached is
-- that agent coming back only when the id matches.
ALTER TABLE nodes ADD COLUMN uplink INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN agent_id TEXT;
