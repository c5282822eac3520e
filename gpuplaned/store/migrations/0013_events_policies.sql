-- Event rules, failure policies, notifications (issue 16).

-- Webhooks (H9): a subscription's least severity and body format; the secret column holds a
-- Fernet token (key in $GPUPLANE_HOME/webhook.key), never the secret itself. The outbox gets
-- one row per matching event and subscription from a trigger, in the event's own transaction,
-- so whatever writes an event also queues its notifications and a restart loses none.
ALTER TABLE webhook_subscriptions ADD COLUMN severity TEXT NOT NULL DEFAULT 'info';
ALTER TABLE webhook_subscriptions ADD COLUMN format TEXT NOT NULL DEFAULT 'json';
CREATE TABLE webhook_outbox (
  id              INTEGER PRIMARY KEY,
  subscription_id TEXT NOT NULL REFERENCES webhook_subscriptions(id) ON DELETE CASCADE,
  event_id        TEXT NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_at         INTEGER NOT NULL DEFAULT 0,
  last_error      TEXT,
  delivered_at    INTEGER,
  gave_up_at      INTEGER,
  UNIQUE (subscription_id, event_id)
);
CREATE INDEX idx_webhook_outbox_due ON webhook_outbox(next_at) WHERE delivered_at IS NULL AND gave_up_at IS NULL;
CREATE TRIGGER webhook_outbox_on_event AFTER INSERT ON events BEGIN
  INSERT OR IGNORE INTO webhook_outbox (subscription_id, event_id, next_at)
  SELECT s.id, NEW.id, 0 FROM webhook_subscriptions s
  WHERE s.enabled = 1
    AND (s.event_types = '*' OR instr(',' || s.event_types || ',', ',' || NEW.type || ',') > 0)
    AND (CASE NEW.severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END)
        >= (CASE s.severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END);
END;

-- Failure policies (H8): one row per (job, trigger event), queued by a trigger in the event's
-- own transaction (so a kill -9 between the trigger and the action loses neither) for a job
-- that has policies; gpuplaned.service.failure_policies settles each in one transaction with
-- what it does (state: pending -> done, or waiting for the job's end on a restart).
-- checkpoint_id: the checkpoint an action keeps (on_nan's last good one), never pruned.
CREATE TABLE policy_actions (
  job_id        TEXT NOT NULL,
  event_id      TEXT NOT NULL,
  trigger       TEXT NOT NULL,
  state         TEXT NOT NULL DEFAULT 'pending',
  action        TEXT,
  reason        TEXT,
  checkpoint_id TEXT,
  created_at    INTEGER NOT NULL,
  due_at        INTEGER,
  done_at       INTEGER,
  PRIMARY KEY (job_id, event_id)
);
CREATE INDEX idx_policy_actions_open ON policy_actions(state) WHERE state != 'done';
CREATE TRIGGER policy_actions_on_event AFTER INSERT ON events
WHEN NEW.type IN ('OOM', 'JOB_FAILED', 'LOSS_NAN', 'RUN_STALLED')
BEGIN
  INSERT OR IGNORE INTO policy_actions (job_id, event_id, trigger, created_at)
  SELECT j.id, NEW.id, NEW.type, NEW.ts FROM jobs j
  WHERE j.id = COALESCE(NEW.job_id, (SELECT r.job_id FROM runs r WHERE r.id = NEW.run_id))
    AND j.policies IS NOT NULL
    AND (j.policies LIKE '%"on\_%' ESCAPE '\');
END;
