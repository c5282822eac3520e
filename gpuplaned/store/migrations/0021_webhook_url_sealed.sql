-- Issue 29 item 9: a webhook's URL is a credential (a Slack, Discord or Bark hook's path is its
-- key), so it is sealed at rest like the signing secret (gpuplaned.service.sealing): url_sealed
-- holds it sealed, and url only what replies show (scheme://host/***). A row made before this
-- column keeps its URL in url until the webhooks actor seals it at its start (seal_legacy_urls).
ALTER TABLE webhook_subscriptions ADD COLUMN url_sealed TEXT;
