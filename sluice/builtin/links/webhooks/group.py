"""The ``webhooks`` handler group: link events and visits to their owner's webhooks.

It reads the ``links`` and ``visits`` streams. For each batch, the owners of the links
concerned are found (``LinkCreated``/``LinkUpdated`` name them, a visit's link is
looked up), and each of their webhooks subscribed to the event's type gets its events:
a message per link change, visits together, up to 100 per message (a batch is what
the consumer read at once, so no visit waits for others: at most 1 s late means
never held back to fill a batch).

Design, so that one slow endpoint never delays another owner's deliveries:

- Each webhook of the batch gets a task of its own, which sends its messages one
  after the other; the tasks of different webhooks run concurrently (the sender
  bounds the calls at once). An entry fails only for the webhooks whose message
  failed: the unit of work is (entry, webhook), and each webhook's part of an entry
  is remembered (the message that carries it, delivered or not), so a retry of the
  entry resends only the messages not delivered, with the same ``webhook-id``.
- The handler waits for the tasks at most ``SLUICE_WEBHOOK_BATCH_WAIT_MS`` (1000).
  Then it returns: entries whose messages are all delivered are acked; an entry
  whose message is still being sent fails with ``StillSending`` and is retried with
  the usual backoff, while its call goes on in the background up to its own timeout.
  When the retry comes the message has been delivered (nothing is sent again) or it
  failed (it is sent again), or it is still running (the retry joins it). So a slow
  endpoint costs the next batch at most the wait, and only its own entries retries.
- Calls to one receiver host are at most ``SLUICE_WEBHOOK_HOST_CONCURRENCY`` at once,
  whichever owners, workers and hosts make them (the sender's ``Slots``). An entry
  whose calls only wait for their turn when the wait ends (for their host's slot, or
  behind their webhook's call before them) is ``NotYet``: it comes back after the
  wait without spending a delivery (waiting is no failed attempt, however busy the
  receiver), and its calls keep their place meanwhile. Only a call under way is
  ``StillSending``.
- An endpoint that refuses (non-2xx), times out or cannot be reached fails its
  entries, which the runtime retries with backoff and dead-letters after
  ``SLUICE_MAX_DELIVERIES``; a target refused by the address checks
  (``TargetRefused``) is permanent: the entry goes to the dead letters at once
  (``sluice dlq redrive webhooks ID`` once the webhook is fixed; deliveries already
  made to the owner's other webhooks are not repeated).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from sluice.app import (
    Event,
    HandlerContext,
    NotYet,
    Resources,
    Slots,
    SluiceError,
    Store,
    utcnow,
    uuid7,
)
from sluice.builtin.links.app import app
from sluice.builtin.links.events import LinkCreated, LinkUpdated, LinkVisited
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.webhooks import repository
from sluice.builtin.links.webhooks.payloads import EVENT_TYPES, compose
from sluice.builtin.links.webhooks.repository import StoredMessage, Webhook
from sluice.builtin.links.webhooks.sender import Sender

log = structlog.get_logger(__name__)

NAME = "webhooks"
PURGE_EVERY_S = 3600.0

Outcomes = dict[str, BaseException | None]  # by event id, for one webhook


class StillSending(SluiceError):
    """The entry's message to a webhook was still being sent when the batch's wait ended."""


@dataclass
class WebhookDeps:
    store: Store
    sender: Sender
    wait_s: float
    retention_s: int
    background: set[asyncio.Task[None]] = field(default_factory=set)
    next_purge: float = 0.0

    async def close(self) -> None:
        """The sender's HTTP client, closed with the worker, not left to the collector."""
        await self.sender.close()


async def _owners(store: Store, events: Sequence[Event]) -> dict[str, str]:
    """The owner of each event's link, by event id (visits of deleted links: none)."""
    owners = {e.event_id: e.owner_id for e in events if isinstance(e, LinkCreated | LinkUpdated)}
    visits = [e for e in events if isinstance(e, LinkVisited)]
    by_code = await repository.link_owners(store, (v.code for v in visits))
    owners.update({v.event_id: by_code[v.code] for v in visits if v.code in by_code})
    return owners


async def _messages(
    deps: WebhookDeps, hook: Webhook, events: Sequence[Event], outcomes: Outcomes
) -> list[tuple[StoredMessage, list[str]]]:
    """The messages to send for ``events`` (those made before for a retried entry, then
    new ones), each with the events it carries; delivered ones are outcomes already."""
    ids = [e.event_id for e in events]
    known = await repository.assigned(deps.store, hook.id, ids)
    resend: dict[str, tuple[StoredMessage, list[str]]] = {}
    for event_id, message in known.items():
        if message.delivered:
            outcomes[event_id] = None
        else:
            resend.setdefault(message.id, (message, []))[1].append(event_id)
    new = [
        (
            StoredMessage(
                id=f"msg_{uuid7()}", webhook_id=hook.id, event_type=kind, body=body, delivered=False
            ),
            carried,
        )
        for kind, body, carried in compose([e for e in events if e.event_id not in known])
    ]
    await repository.save_messages(deps.store, new)
    return [*resend.values(), *new]


async def _prepared(
    deps: WebhookDeps, hook: Webhook, events: Sequence[Event], outcomes: Outcomes
) -> list[tuple[StoredMessage, list[str]]]:
    """``_messages``, or none when the database failed (every event of ``hook`` failed)."""
    try:
        return await _messages(deps, hook, events, outcomes)
    except Exception as exc:
        outcomes.update((e.event_id, exc) for e in events if e.event_id not in outcomes)
        return []


async def _deliver(
    deps: WebhookDeps,
    hook: Webhook,
    messages: Sequence[tuple[StoredMessage, list[str]]],
    outcomes: Outcomes,
    current: dict[str, str],
) -> None:
    """Send ``hook`` its messages in order, noting each event's outcome as it comes
    (``current``: the message of each webhook being sent, by webhook id)."""
    for message, carried in messages:
        current[hook.id] = message.id
        error: BaseException | None = None
        try:
            await asyncio.shield(deps.sender.send(hook, message))
        except Exception as exc:
            error = exc
        outcomes.update((event_id, error) for event_id in carried)


def _plan(
    events: Sequence[Event], owners: Mapping[str, str], hooks: Sequence[Webhook]
) -> dict[str, tuple[Webhook, list[Event]]]:
    """Each webhook's events of the batch (once each: a relay may publish one twice)."""
    by_owner: dict[str, list[Webhook]] = {}
    for hook in hooks:
        by_owner.setdefault(hook.owner_id, []).append(hook)
    plan: dict[str, tuple[Webhook, list[Event]]] = {}
    seen: set[tuple[str, str]] = set()
    for event in events:
        kind = EVENT_TYPES[type(event)]
        for hook in by_owner.get(owners.get(event.event_id, ""), []):
            if kind in hook.events and (hook.id, event.event_id) not in seen:
                seen.add((hook.id, event.event_id))
                plan.setdefault(hook.id, (hook, []))[1].append(event)
    return plan


def _failure(errors: Sequence[BaseException]) -> BaseException:
    """An entry's failure: retried if any webhook's is; permanent only if all are; not
    yet (no failure) if every one of its calls only waits for its host's turn."""
    errors = sorted(errors, key=lambda e: isinstance(e, NotYet))
    return next((e for e in errors if not getattr(e, "permanent", False)), errors[0])


async def handle_batch(deps: WebhookDeps, events: Sequence[Event]) -> dict[str, BaseException]:
    """The batch handler (see the module docstring); the failed events, by id."""
    if not events:
        return {}
    owners = await _owners(deps.store, events)
    hooks = await repository.of_owners(deps.store, set(owners.values()))
    plan = _plan(events, owners, hooks)
    outcomes: dict[str, Outcomes] = {hook_id: {} for hook_id in plan}
    # The database part first, for every webhook: the wait below is the endpoints' alone.
    prepared = await asyncio.gather(
        *(
            _prepared(deps, hook, hook_events, outcomes[hook_id])
            for hook_id, (hook, hook_events) in plan.items()
        )
    )
    current: dict[str, str] = {}
    tasks = [
        asyncio.create_task(_deliver(deps, hook, messages, outcomes[hook.id], current))
        for (hook, _), messages in zip(plan.values(), prepared, strict=True)
        if messages
    ]
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=deps.wait_s)
        for task in pending:  # goes on: its outcome is stored when it comes
            deps.background.add(task)
            task.add_done_callback(deps.background.discard)
    carried = {
        hook_id: {e.event_id for e in hook_events} for hook_id, (_, hook_events) in plan.items()
    }
    still = StillSending(f"the call was still running after {deps.wait_s:g} s; retried")
    queued = NotYet("its calls wait for their turn", retry_in_s=deps.wait_s)
    # What an event with no outcome yet is: waiting for its host's turn, or sending.
    unsent = {
        hook_id: queued if current.get(hook_id) in deps.sender.waiting else still
        for hook_id in plan
    }
    failures: dict[str, BaseException] = {}
    for event in events:
        event_id = event.event_id
        errors = [
            outcome
            for hook_id, results in outcomes.items()
            if event_id in carried[hook_id]
            and (outcome := results.get(event_id, unsent[hook_id])) is not None
        ]
        if errors:
            failures[event_id] = _failure(errors)
    _purge_now_and_then(deps)
    return failures


def _purge_now_and_then(deps: WebhookDeps) -> None:
    """Messages older than the deliveries' retention, at most once an hour per process."""
    now = time.monotonic()
    if now < deps.next_purge:
        return
    deps.next_purge = now + PURGE_EVERY_S

    async def purge() -> None:
        try:
            removed = await repository.purge_messages(deps.store, utcnow(), deps.retention_s)
            if removed:
                log.info("webhook messages purged", removed=removed)
        except Exception as exc:  # next time; nothing depends on it
            log.warning("webhook messages not purged", error=str(exc))

    task = asyncio.create_task(purge())
    deps.background.add(task)
    task.add_done_callback(deps.background.discard)


def build_deps(resources: Resources) -> WebhookDeps:
    config, own = resources.config, LinksSettings.of(resources)
    # A slot's lease outlasts a call (its deadline), renewed while the call runs anyway.
    hosts = Slots.of(
        resources,
        "webhook-hosts",
        own.webhook_host_concurrency,
        lease_s=max(30.0, own.webhook_timeout_seconds * 2),
    )
    sender = Sender(
        resources.store, own.webhook_timeout_seconds, bool(own.webhook_allow_private), hosts
    )
    return WebhookDeps(
        store=resources.store,
        sender=sender,
        wait_s=own.webhook_batch_wait_ms / 1000,
        retention_s=config.delivery_retention,
    )


webhooks_group = app.group(NAME, deps=build_deps)


@webhooks_group.batch(*EVENT_TYPES)
async def on_events(
    events: Sequence[Event], ctx: HandlerContext[WebhookDeps]
) -> Mapping[str, BaseException]:
    return await handle_batch(ctx.deps, events)
