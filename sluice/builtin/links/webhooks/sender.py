"""One call to a webhook: sign, POST, record the attempt.

Calls to one webhook go one at a time per process (a lock per webhook); calls to one
receiver host at most ``SLUICE_WEBHOOK_HOST_CONCURRENCY`` at once across every owner,
worker and host (``Slots`` of the host name: first come, first served, a killed
worker's slot freed when its lease runs out), so many owners' webhooks on one receiver
never flood it; at most ``SENDS_AT_ONCE`` calls at once in a process (taken after the
host's slot: calls waiting for one busy host never hold up calls to other hosts),
each within ``SLUICE_WEBHOOK_TIMEOUT_SECONDS``
(connecting included); redirects are not followed (a 3xx is a failure, and cannot
lead a call to an address the checks did not see). An attempt of a message already
running in this process is joined, never started twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import aiohttp
import structlog
from aiohttp.abc import AbstractResolver
from yarl import URL

from sluice.app import Slots, SluiceError, Store, utcnow
from sluice.builtin.links.webhooks import repository
from sluice.builtin.links.webhooks.repository import StoredMessage, Webhook
from sluice.builtin.links.webhooks.signing import secret_key, signature
from sluice.builtin.links.webhooks.targets import PinnedResolver, TargetRefused, check_literal

log = structlog.get_logger(__name__)

SENDS_AT_ONCE = 64
USER_AGENT = "sluice-webhooks/1"


class DeliveryFailed(SluiceError):
    """The endpoint answered other than 2xx, timed out, or could not be reached."""


class Sender:
    def __init__(
        self,
        store: Store,
        timeout_s: float,
        allow_private: bool,
        hosts: Slots | None = None,
        resolver: Callable[[], AbstractResolver] | None = None,
    ) -> None:
        """``hosts``: the slots of receiver hosts (None: no bound); ``resolver``: makes
        the resolver under the address checks (tests name hosts)."""
        self.store = store
        self.hosts = hosts
        # Messages whose attempt waits for its turn (its webhook's call before it, its
        # receiver host's slot): not sending yet.
        self.waiting: set[str] = set()
        self.timeout_s = timeout_s
        self.allow_private = allow_private
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._slots = asyncio.Semaphore(SENDS_AT_ONCE)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            inner = self._resolver() if self._resolver is not None else None
            resolver = inner if self.allow_private else PinnedResolver(inner)
            # No DNS cache: every connection is made to the addresses just checked.
            connector = aiohttp.TCPConnector(
                resolver=resolver, use_dns_cache=False, limit=SENDS_AT_ONCE
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers={"User-Agent": USER_AGENT},
            )
        return self._session

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def send(self, hook: Webhook, message: StoredMessage) -> asyncio.Task[None]:
        """The attempt of ``message`` running in this process, or a new one. It raises
        ``DeliveryFailed`` or ``TargetRefused`` when the call failed."""
        task = self._inflight.get(message.id)
        if task is None:
            task = asyncio.create_task(self._attempt(hook, message))
            self._inflight[message.id] = task
            task.add_done_callback(lambda done: self._finished(message.id, done))
        return task

    def _finished(self, message_id: str, task: asyncio.Task[None]) -> None:
        self._inflight.pop(message_id, None)
        if not task.cancelled():
            task.exception()  # retrieved: its waiters (if any) saw it already

    def _lock(self, webhook_id: str) -> asyncio.Lock:
        return self._locks.setdefault(webhook_id, asyncio.Lock())

    async def _attempt(self, hook: Webhook, message: StoredMessage) -> None:
        self.waiting.add(message.id)
        try:
            async with self._lock(hook.id):
                if await repository.is_delivered(self.store, message.id):
                    return  # by an earlier attempt this one waited for, or another worker
                async with self._host(hook, message):
                    self.waiting.discard(message.id)
                    async with self._slots:
                        await self._call(hook, message)
        finally:
            self.waiting.discard(message.id)

    def _host(self, hook: Webhook, message: StoredMessage) -> AbstractAsyncContextManager[None]:
        """A slot of the receiver's host, held while the call runs."""
        host = (URL(hook.url, encoded=True).host or "").lower()
        if self.hosts is None or not host:
            return contextlib.nullcontext()
        return self.hosts.hold(host, f"{message.id}:{uuid.uuid4().hex}")

    async def _call(self, hook: Webhook, message: StoredMessage) -> None:
        if await repository.is_delivered(self.store, message.id):
            return  # went out while this attempt waited (an earlier one, another worker)
        attempt = await repository.next_attempt(self.store, message.id)
        started, clock = utcnow(), time.perf_counter()
        status: int | None = None
        failure: SluiceError | None = None
        try:
            status = await self._post(hook, message)
            if not 200 <= status < 300:
                failure = DeliveryFailed(f"the endpoint answered HTTP {status}")
        except TargetRefused as exc:
            failure = exc
            if exc.address is not None:  # for the operator only (targets.TargetRefused)
                log.info(
                    "webhook target resolves to a non-public address",
                    webhook_id=hook.id,
                    url=hook.url,
                    address=exc.address,
                )
        except TimeoutError:
            failure = DeliveryFailed(f"no answer within {self.timeout_s:g} s")
        except aiohttp.ClientError as exc:
            failure = DeliveryFailed(f"{type(exc).__name__}: {exc}")
        duration_ms = (time.perf_counter() - clock) * 1000
        error = None if failure is None or status is not None else str(failure)
        await repository.record(
            self.store, hook.id, message, attempt, status, error, started, duration_ms
        )
        log.info(
            "webhook call",
            webhook_id=hook.id,
            message_id=message.id,
            event_type=message.event_type,
            attempt=attempt,
            status=status,
            error=error,
            duration_ms=round(duration_ms, 1),
        )
        if failure is not None:
            raise failure

    async def _post(self, hook: Webhook, message: StoredMessage) -> int:
        url = URL(hook.url, encoded=True)
        if not self.allow_private:  # aiohttp does not ask the resolver about literals
            check_literal(url.host or "")
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "webhook-id": message.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(
                secret_key(hook.secret), message.id, timestamp, message.body
            ),
        }
        async with self._client().post(
            url, data=message.body, headers=headers, allow_redirects=False
        ) as response:
            return response.status
