"""Webhooks: a project's subscriptions to its sessions' events, delivered as signed HTTP POSTs
(Standard Webhooks) from a durable outbox in PostgreSQL.

    events.py         the event types, by the journal's event kinds
    destinations.py   where a webhook may point: https, public addresses (serverkit.addresses)
    subscriptions.py  the webhooks (WebhookService's store side), their sealed secrets, the delivery log
    sender.py         one signed POST to an address checked just before, with bounded waits and reads
    dispatcher.py     the outbox's worker: leases due deliveries, sends, retries with backoff
    api.py            WebhookService: protobuf in and out

The outbox is filled inside the journal's own transactions, by a trigger on `events`
(migrations/0034_webhooks.sql), so no event that commits lacks its deliveries and none is lost to a
crash; any replica's dispatcher sends them, one replica at a time per delivery (a row lease).
"""
