-- Finished webhook deliveries are deleted `--webhook-delivery-retention` after they finished
-- (controlplane.webhooks.dispatcher): this index finds the oldest without reading the pending ones.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at) WHERE state <> 'pending';
