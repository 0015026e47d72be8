"""`astrabox webhooks …`: a project's webhooks from the command line (WebhookService; admins).

    astrabox webhooks create URL --event turn.completed [--event …] [--description TEXT]
    astrabox webhooks list | show ID | delete ID
    astrabox webhooks update ID [--url URL] [--event …] [--description TEXT] [--enable | --disable]
    astrabox webhooks rotate-secret ID [--overlap SECONDS]
    astrabox webhooks deliveries ID [--state pending|delivered|failed] [--event TYPE]
    astrabox webhooks redeliver ID DELIVERY_ID

`create` and `rotate-secret` print the signing secret once: give it to the receiver.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from astrabox.client import AstraBoxClient
from astrabox.webhook_subscriptions import EVENT_TYPES, Webhook, WebhookDelivery

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = ("webhooks",)
"""The subcommands this module adds to `astrabox`."""


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `astrabox webhooks` to `sub`, taking the `connection` options."""
    webhooks = sub.add_parser(
        "webhooks",
        help="signed HTTP POSTs of the project's session events: create, list, deliveries",
        parents=[connection],
    )
    actions = webhooks.add_subparsers(dest="action", required=True)
    event_help = f"an event type to deliver (repeat for several): {', '.join(EVENT_TYPES)}"
    create = actions.add_parser("create", help="subscribe an https URL to event types; prints its secret once")
    create.add_argument("url", metavar="URL", help="where deliveries are POSTed (https, a public address)")
    create.add_argument("--event", dest="events", action="append", required=True, metavar="TYPE", help=event_help)
    create.add_argument("--description", default="", help="a note about it")
    actions.add_parser("list", help="the project's webhooks")
    actions.add_parser("show", help="one webhook").add_argument("webhook_id", metavar="ID", help="the webhook's id")
    update = actions.add_parser("update", help="change a webhook's URL, event types, description or state")
    update.add_argument("webhook_id", metavar="ID", help="the webhook's id")
    update.add_argument("--url", help="a new URL")
    update.add_argument("--event", dest="events", action="append", metavar="TYPE", help=event_help + " (replaces all)")
    update.add_argument("--description", help="a new description")
    state = update.add_mutually_exclusive_group()
    state.add_argument("--enable", dest="enabled", action="store_const", const=True, help="deliver new events")
    state.add_argument("--disable", dest="enabled", action="store_const", const=False, help="deliver no new events")
    actions.add_parser("delete", help="delete a webhook and its deliveries").add_argument(
        "webhook_id", metavar="ID", help="the webhook's id"
    )
    rotate = actions.add_parser("rotate-secret", help="a new secret; the old one also signs for the overlap")
    rotate.add_argument("webhook_id", metavar="ID", help="the webhook's id")
    rotate.add_argument(
        "--overlap", type=int, default=0, metavar="SECONDS", help="how long the old secret signs too (default a day)"
    )
    listed = actions.add_parser("deliveries", help="a webhook's deliveries, newest first, with their attempts")
    listed.add_argument("webhook_id", metavar="ID", help="the webhook's id")
    listed.add_argument("--state", choices=("pending", "delivered", "failed"), default="", help="only in this state")
    listed.add_argument("--event", default="", metavar="TYPE", help="only of this event type")
    listed.add_argument("--limit", type=int, default=20, help="at most this many (default %(default)s)")
    redeliver = actions.add_parser("redeliver", help="send a delivery again, under the same webhook-id")
    redeliver.add_argument("webhook_id", metavar="ID", help="the webhook's id")
    redeliver.add_argument("delivery_id", metavar="DELIVERY_ID", help="the delivery's id")
    webhooks.set_defaults(func=func)


def _show(webhook: Webhook) -> str:
    state = "enabled" if webhook.enabled else "disabled"
    lines = [
        f"{webhook.webhook_id}  {state}  secret v{webhook.secret_version}",
        f"  url:     {webhook.url}",
        f"  events:  {', '.join(webhook.event_types)}",
    ]
    if webhook.description:
        lines.append(f"  note:    {webhook.description}")
    if webhook.previous_secret_expire_time is not None:
        lines.append(
            f"  previous secret signs until {webhook.previous_secret_expire_time.isoformat(timespec='seconds')}"
        )
    return "\n".join(lines)


def _delivery(delivery: WebhookDelivery) -> str:
    lines = [
        f"{delivery.delivery_id}  {delivery.event_type:<26} {delivery.state:<9} attempts {delivery.attempts}"
        f"  session {delivery.session_id} seq {delivery.seq}"
    ]
    for attempt in delivery.attempt_log:
        outcome = str(attempt.status_code) if attempt.status_code else (attempt.error or "in flight")
        lines.append(f"    #{attempt.attempt} {attempt.start_time.isoformat(timespec='seconds')}  {outcome}")
    return "\n".join(lines)


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out the parsed `astrabox webhooks` command `args` with `client`; the exit status."""
    hooks = client.webhooks
    if args.action == "create":
        created = await hooks.create(args.url, args.events, description=args.description)
        print(_show(created.webhook))
        print(f"secret (shown once): {created.secret}", flush=True)
    elif args.action == "list":
        async for webhook in hooks.list():
            print(_show(webhook))
    elif args.action == "show":
        print(_show(await hooks.get(args.webhook_id)))
    elif args.action == "update":
        changed = await hooks.update(
            args.webhook_id, url=args.url, event_types=args.events, description=args.description, enabled=args.enabled
        )
        print(_show(changed))
    elif args.action == "delete":
        await hooks.delete(args.webhook_id)
        print(f"deleted {args.webhook_id}")
    elif args.action == "rotate-secret":
        rotated = await hooks.rotate_secret(args.webhook_id, overlap_seconds=args.overlap)
        print(_show(rotated.webhook))
        print(f"secret (shown once): {rotated.secret}", flush=True)
    elif args.action == "deliveries":
        shown = 0
        async for delivery in hooks.deliveries(args.webhook_id, state=args.state, event_type=args.event):
            if shown >= args.limit:
                break
            print(_delivery(delivery))
            shown += 1
    else:
        print(_delivery(await hooks.redeliver(args.webhook_id, args.delivery_id)))
    return 0
