-- A webhook subscribed to JOB_FAILED hears every failed attempt: OOM and JOB_TIMEOUT are the
-- family's more specific kinds (gpuplaned.domain.event_types.with_kinds; domain/webhooks.matches
-- is this rule in Python). Before, an OOM job sent nothing to a JOB_FAILED subscription.
DROP TRIGGER webhook_outbox_on_event;
CREATE TRIGGER webhook_outbox_on_event AFTER INSERT ON events BEGIN
  INSERT OR IGNORE INTO webhook_outbox (subscription_id, event_id, next_at)
  SELECT s.id, NEW.id, 0 FROM webhook_subscriptions s
  WHERE s.enabled = 1
    AND (s.event_types = '*' OR instr(',' || s.event_types || ',', ',' || NEW.type || ',') > 0
         OR (NEW.type IN ('OOM', 'JOB_TIMEOUT') AND instr(',' || s.event_types || ',', ',JOB_FAILED,') > 0))
    AND (CASE NEW.severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END)
        >= (CASE s.severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END);
END;
