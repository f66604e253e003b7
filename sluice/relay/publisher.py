"""The relay's publishing side: plain pipelined XADDs, on connections that know their server.

A Redis that crashed may come back without its last writes (AOF ``everysec``), and a
cluster replica promoted in a failover may lack the last writes of its primary. The
relay must never publish a batch to such a server before it compared what the streams
hold with the database, or the batch would hide the lost tail. An XADD cannot check the
server it runs on, but a connection can: a TCP connection is to one server process for
its whole life (a restarted Redis closes it), so a connection whose server ``run_id``
was read and compared when it was opened, and that never reconnects by itself, sends
every command to the server the relay reconciled with, or fails.

So each server holding a partition gets one such connection here. A batch goes to it as
plain pipelined XADDs, written 64 at a time as they are packed (the server works on one
chunk while the next is made), and its replies are counted straight off the socket by a
hiredis reader (see ``bench/README.md``, pipeline.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from typing import Any, NoReturn, cast

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from sluice.store import StoredEvent
from sluice.streams.engine_keys import Keys
from sluice.streams.partitions import payload_partition

_RUN_ID = re.compile(rb"run_id:(\w+)")
# Redis answers a command sent to a partition it no longer serves with one of these.
_MOVED = ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN")


class ServerChanged(Exception):
    """A partition is on a server other than the one the relay reconciled with (its
    connection refused it, or the cluster moved the partition); that server was sent
    nothing by this batch, other servers may have been."""


class _StaleServer(RedisError):
    """Raised while connecting: the server's run_id is not the expected one."""


class _Replies(Exception):
    """Redis refused some XADDs of a batch (the first refusal)."""


def _run_id_of(info: Any) -> str:
    """The ``run_id`` in a reply to ``INFO server``."""
    found = _RUN_ID.search(info if isinstance(info, bytes) else str(info).encode())
    return found.group(1).decode() if found else ""


class _KnownServer(AbstractConnection):
    """A connection that, on every connect, reads the server's ``run_id`` and refuses a
    server other than ``expected_run_id`` (mixed into the client's connection class)."""

    expected_run_id = ""
    _replies: tuple[object, Any] = (None, None)  # (the stream it reads, a hiredis reader)

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        await super().on_connect_check_health(check_health)
        await self.send_command("INFO", "server", check_health=False)
        found = _run_id_of(await self.read_response())
        if found != self.expected_run_id:
            raise _StaleServer(f"run_id {found}, expected {self.expected_run_id}")

    async def write_all(self, chunks: Iterable[bytes]) -> object:
        """Write the packed commands of ``chunks`` as each is made (the server works on
        the first while the next is packed); returns what ``replies`` takes to know it
        reads on the same connection."""
        try:
            if not self.is_connected:
                await self.connect()  # type: ignore[no-untyped-call]
            # ``_writer`` is the connection's stream (redis-py 8.1's asyncio Connection);
            # a write goes out at once when the socket takes it.
            writer = cast(asyncio.StreamWriter, self._writer)
            for chunk in chunks:
                writer.write(chunk)
            await writer.drain()
            return self._reader
        except BaseException as exc:
            await self._fail(exc)

    async def replies(self, written: object, count: int) -> None:
        """Read the ``count`` replies to what was written when ``write_all`` returned
        ``written``; raises when the connection was closed since (they are lost).

        Any failure here or in ``write_all`` leaves the connection closed: replies left
        unread would be taken for the next batch's.
        """
        if self._reader is None or self._reader is not written:
            raise RedisConnectionError("the connection closed before its replies were read")
        try:
            await self._count_replies(count)
        except BaseException as exc:
            await self._fail(exc)

    async def _fail(self, exc: BaseException) -> NoReturn:
        await self.disconnect(nowait=True)
        if isinstance(exc, OSError):
            raise RedisConnectionError(f"publishing: {exc}") from exc
        raise exc

    async def _count_replies(self, count: int) -> None:
        # The replies are stream ids, read by a hiredis reader of their own: redis-py's
        # read_response per reply costs more than the rest of the relay's work per event.
        # ``_reader`` is the connection's stream (redis-py 8.1's asyncio Connection).
        # One hiredis reader per stream, kept between calls: a read may take replies
        # to the next batch too.
        stream = cast(asyncio.StreamReader, self._reader)
        if self._replies[0] is not stream:
            self._replies = (stream, hiredis.Reader())
        replies = self._replies[1]
        refused: Any = None
        while count:
            reply = replies.gets()
            if reply is False:
                data = await stream.read(65536)
                if not data:
                    raise RedisConnectionError("Connection closed by server.")
                replies.feed(data)
                continue
            count -= 1
            if isinstance(reply, hiredis.ReplyError) and refused is None:
                refused = reply
        if refused is not None:
            raise _Replies(str(refused))


_CHECKED: dict[type[AbstractConnection], type[_KnownServer]] = {}


def _checked_class(base: type[AbstractConnection]) -> type[_KnownServer]:
    """``base`` with ``_KnownServer`` mixed in, made once per base (a connection is
    made again after every failure)."""
    checked = _CHECKED.get(base)
    if checked is None:
        checked = _CHECKED[base] = cast(
            type[_KnownServer], type(f"Checked{base.__name__}", (_KnownServer, base), {})
        )
    return checked


def head(stream: bytes) -> bytes:
    """What every XADD to ``stream`` starts with, as RESP, up to the event id's value."""
    return b"*13\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$8\r\nevent_id\r\n" % (
        len(stream),
        stream,
    )


def pack(head: bytes, event: StoredEvent) -> bytes:
    """The XADD of one event, as RESP, after its stream's ``head``: by hand, at half the
    cost of ``hiredis.pack_command`` (the relay's largest cost per event)."""
    e, s, t, r, d = (
        event.event_id.encode(),
        b"%d" % event.seq,
        event.type.encode(),
        event.trace_id.encode(),
        event.payload,
    )
    packed = (
        b"%s$%d\r\n%s\r\n$3\r\nseq\r\n$%d\r\n%s\r\n$4\r\ntype\r\n$%d\r\n%s\r\n"
        b"$8\r\ntrace_id\r\n$%d\r\n%s\r\n$4\r\ndata\r\n$%d\r\n%s\r\n"
        % (head, len(e), e, len(s), s, len(t), t, len(r), r, len(d), d)
    )
    if event.traceparent is None:
        return packed
    # Tracing on (sluice.telemetry.tracing): one field more, so 15 items, not 13.
    p = event.traceparent.encode()
    return b"*15%s$11\r\ntraceparent\r\n$%d\r\n%s\r\n" % (packed[3:], len(p), p)


def _chunks(packed: list[tuple[bytes, StoredEvent]], size: int = 64) -> Iterator[bytes]:
    """The XADDs of ``packed`` (stream head, event), ``size`` per chunk."""
    for i in range(0, len(packed), size):
        yield b"".join([pack(h, e) for h, e in packed[i : i + size]])


class Sent:
    """A batch written to its servers, its replies not read yet (``Publisher.confirm``).

    Batches are confirmed in the order they were sent: a connection's replies come in
    the order of its commands.
    """

    def __init__(self, parts: list[tuple[_KnownServer, object, int]]) -> None:
        self.parts = parts  # (connection, what its write_all returned, commands)


class Publisher:
    """One checked connection per server holding a partition; a batch per server in one
    write. ``run_ids`` (partition: run_id) is what the relay reconciled with."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, *, timeout: float = 10.0) -> None:
        self.redis = redis
        self.keys = keys
        self.timeout = timeout
        self._heads: dict[tuple[str, int], bytes] = {}  # (aggregate, partition) -> head()
        # (host, port or path, run_id) -> its connection
        self._connections: dict[tuple[Any, ...], _KnownServer] = {}

    async def publish(self, events: Sequence[StoredEvent], run_ids: dict[int, str]) -> None:
        """XADD ``events`` (in order within each partition) to the servers of
        ``run_ids`` and wait for their replies; raises ``ServerChanged`` when one of
        them is not that server."""
        await self.confirm(await self.send(events, run_ids))

    async def send(self, events: Sequence[StoredEvent], run_ids: dict[int, str]) -> Sent:
        """Write the XADDs of ``events`` to the servers of ``run_ids`` without waiting
        for their replies; raises ``ServerChanged`` as ``publish`` does."""
        # id(connection) -> (connection, [(stream head, event)])
        batches: dict[int, tuple[_KnownServer, list[tuple[bytes, StoredEvent]]]] = {}
        partitions = self.keys.partitions
        by_partition: dict[int, tuple[_KnownServer, list[tuple[bytes, StoredEvent]]]] = {}
        for event in events:
            p = payload_partition(event.aggregate, event.payload, partitions)
            batch = by_partition.get(p)
            if batch is None:
                conn = self._connection(p, run_ids.get(p, ""))
                batch = batches.setdefault(id(conn), (conn, []))
                by_partition[p] = batch
            stream = self._heads.get((event.aggregate, p))
            if stream is None:
                stream = self._heads[event.aggregate, p] = head(
                    self.keys.stream(event.aggregate, p).encode()
                )
            batch[1].append((stream, event))
        parts = list(batches.values())
        written = await self._each(conn.write_all(_chunks(packed)) for conn, packed in parts)
        return Sent(
            [(conn, w, len(packed)) for (conn, packed), w in zip(parts, written, strict=True)]
        )

    async def confirm(self, sent: Sent) -> None:
        """Read the replies to ``sent``; raises ``ServerChanged`` when a server refused
        its partition (the cluster moved it), ``ResponseError`` when Redis refused an
        XADD for another reason, a connection error when one was lost."""
        await self._each(conn.replies(w, count) for conn, w, count in sent.parts)

    async def _each(self, steps: Iterable[Awaitable[Any]]) -> list[Any]:
        """Run ``steps`` at once (one per server) and raise the first failure that
        matters most: a changed server first."""

        async def timed(step: Awaitable[Any]) -> Any:
            async with asyncio.timeout(self.timeout):
                return await step

        outcomes = await asyncio.gather(*(timed(s) for s in steps), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if not errors:
            return outcomes
        # The other servers' replies may be unread: every connection starts afresh.
        await self.close()
        for error in errors:
            if isinstance(error, _StaleServer) or (
                isinstance(error, _Replies) and str(error).startswith(_MOVED)
            ):
                raise ServerChanged(str(error)) from error
        error = errors[0]
        if isinstance(error, _Replies):
            raise ResponseError(str(error)) from error
        raise error

    def _connection(self, partition: int, run_id: str) -> _KnownServer:
        base, kwargs = self._server_of(partition)
        address = (kwargs.get("host"), kwargs.get("port"), kwargs.get("path"), run_id)
        conn = self._connections.get(address)
        if conn is None:
            kwargs = {**kwargs, "retry": Retry(NoBackoff(), 0), "retry_on_error": []}
            kwargs.pop("health_check_interval", None)
            conn = _checked_class(base)(**kwargs)
            conn.expected_run_id = run_id
            self._connections[address] = conn
        return conn

    def _server_of(self, partition: int) -> tuple[type[AbstractConnection], dict[str, Any]]:
        """The connection class and arguments of the server holding ``partition`` now."""
        get_node = getattr(self.redis, "get_node_from_key", None)
        if get_node is None:
            pool = self.redis.connection_pool
            return pool.connection_class, dict(pool.connection_kwargs)
        node = get_node(self.keys.space(partition))
        if node is None:
            raise RedisConnectionError(f"no primary serves partition {partition}")
        return node.connection_class, {
            **node.connection_kwargs,
            "host": node.host,
            "port": node.port,
        }

    async def close(self) -> None:
        """Close every connection (the next batch opens and checks them again)."""
        connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            await conn.disconnect(nowait=True)
