"""OpenTelemetry tracing: one trace from a request through the outbox, the relay and
every handler, exported with OpenTelemetry's own SDK (docs/guides/tracing.md).

Off unless the process's environment names an OTLP endpoint and the ``otel`` extra is
installed: then ``ENABLED`` stays False, nothing here is imported beyond this module,
and the hot paths (the request middleware, the store's append, the relay's send, a
handler's call) pay one check of that flag and create no span. Configured only by
OpenTelemetry's standard variables, read by the SDK itself (endpoint, headers,
sampler, resource, batch processor), so a team's usual settings apply unchanged.

Context travels as W3C ``traceparent`` strings: a request's span is the parent of the
events it appends (their ``traceparent`` column and stream field), and a handler's
span, a child of that, is the parent of what the handler appends in turn.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import structlog

from sluice.telemetry.attempts import within

if TYPE_CHECKING:
    from aiohttp import web

    from sluice.store.base import StoredEvent
    from sluice.streams.messages import Message

log = structlog.get_logger(__name__)

# The one check the hot paths make. True once ``configure`` (or ``install``) set up a
# tracer provider in this process.
ENABLED = False

_tracer: Any = None  # opentelemetry.trace.Tracer of the provider below
_provider: Any = None  # opentelemetry.sdk.trace.TracerProvider
_propagator: Any = None  # the W3C trace-context propagator
_max_links: int | None = 128  # the links a span keeps (the SDK drops the rest)

# The trace id the next root span gets, when it continues a trace sluice knows only by
# its id (an event appended while tracing was off, say): see ``_ids``.
_NEXT_TRACE: ContextVar[str] = ContextVar("sluice_next_trace", default="")
_HEX32 = re.compile(r"[0-9a-f]{32}")

# OTEL_EXPORTER_OTLP_PROTOCOL values sluice exports with: the extra brings the HTTP
# exporter only (protobuf over HTTP, which every collector and vendor endpoint takes).
PROTOCOLS = ("http/protobuf",)
SCOPE = "sluice"


def wanted(env: dict[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint for traces is set and
    the SDK is not disabled (``OTEL_SDK_DISABLED=true``)."""
    env = dict(os.environ) if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure(service: str) -> bool:
    """Set up tracing for this process from the standard variables, once; returns
    whether it is on. ``service`` is the ``service.name`` when neither
    ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` names one."""
    if ENABLED:
        return True
    if not wanted():
        return False
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in PROTOCOLS:
        log.warning(
            "tracing off: unsupported OTLP protocol", protocol=protocol, supported=PROTOCOLS
        )
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing off: an OTLP endpoint is set but the 'otel' extra is not installed")
        return False
    provider = _new_provider(service)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # Global too, so that an app's own spans (opentelemetry.trace.get_tracer) nest in ours.
    trace.set_tracer_provider(provider)
    install(provider)
    log.info("tracing on", service=provider.resource.attributes.get("service.name"))
    return True


def _new_provider(service: str) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service}))
    # The sampler comes from OTEL_TRACES_SAMPLER(_ARG): parent-based always-on by default.
    return TracerProvider(resource=resource, id_generator=_ids())


def _ids() -> Any:
    """Trace ids made as sluice makes them (time first: ``new_trace_id``), so a trace
    that starts here has the id /admin and the logs show."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from sluice.events import new_trace_id

    class SluiceIds(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            return int(_NEXT_TRACE.get() or new_trace_id(), 16)

    return SluiceIds()


def install(provider: Any) -> None:
    """Trace with ``provider`` (an SDK ``TracerProvider``) from now on; the tests give
    one with an in-memory exporter."""
    global ENABLED, _tracer, _provider, _propagator, _max_links
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _max_links = SpanLimits().max_links  # OTEL_SPAN_LINK_COUNT_LIMIT, 128 by default
    _provider = provider
    _tracer = provider.get_tracer(SCOPE)
    _propagator = TraceContextTextMapPropagator()
    ENABLED = True


def shutdown() -> None:
    """Export the spans still buffered and stop tracing (a process's stop)."""
    global ENABLED, _tracer, _provider
    if _provider is None:
        return
    provider, _provider, _tracer, ENABLED = _provider, None, None, False
    try:
        provider.shutdown()  # flushes the batch processor
    except Exception:  # an unreachable collector must not fail the stop
        log.warning("tracing: flushing spans at stop failed", exc_info=True)


def new_provider(service: str = "sluice") -> Any:
    """A provider as ``configure`` makes it, without an exporter (the tests add theirs)."""
    return _new_provider(service)


# --- context ------------------------------------------------------------------------


def tracer() -> Any:
    """The tracer sluice's spans are made with (None while tracing is off)."""
    return _tracer


def parent(traceparent: str | None) -> Any:
    """The OpenTelemetry context a W3C ``traceparent`` names (an empty one if none)."""
    from opentelemetry.context import Context

    if not traceparent:
        return Context()
    return _propagator.extract({"traceparent": traceparent}, context=Context())


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span (what an event appended now carries),
    None outside any span."""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


@contextmanager
def under(traceparent: str | None) -> Iterator[None]:
    """The span ``traceparent`` names as the current one (what is appended meanwhile
    carries it): a fired job's JobDue event gets the scheduling request's span."""
    from opentelemetry import context

    token = context.attach(parent(traceparent))
    try:
        yield
    finally:
        context.detach(token)


def _hex(span: Any) -> str:
    return f"{span.get_span_context().trace_id:032x}"


# --- spans --------------------------------------------------------------------------


class Server:
    """A request's SERVER span, current while the request runs (``end`` ends it)."""

    __slots__ = ("span", "token", "trace_id")

    def __init__(self, request: web.Request) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind

        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else None
        attributes: dict[str, Any] = {
            "http.request.method": request.method,
            "url.path": request.path,
            "url.scheme": request.scheme,
        }
        if route is not None:
            attributes["http.route"] = route
        if request.query_string:
            attributes["url.query"] = request.query_string
        if agent := request.headers.get("User-Agent"):
            attributes["user_agent.original"] = agent
        if request.remote:
            attributes["client.address"] = request.remote
        name = f"{request.method} {route}" if route is not None else request.method
        self.span = _tracer.start_span(
            name,
            context=parent(request.headers.get("traceparent")),
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        self.token = context.attach(trace.set_span_in_context(self.span))
        self.trace_id = _hex(self.span)

    def end(self, status: int, error: BaseException | None = None) -> None:
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        span = self.span
        span.set_attribute("http.response.status_code", status)
        if status >= 500:  # a 4xx is the client's error, not the server's (HTTP conventions)
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", type(error).__qualname__ if error else str(status))
            if error is not None:
                span.record_exception(error)
        span.end()
        context.detach(self.token)


def consumed(call: Awaitable[None], message: Message, group: str, stream: str) -> Awaitable[None]:
    """``call`` (a handler's attempt at ``message``) inside a CONSUMER span, a child of
    the span that appended the event. ``stream`` is the event's aggregate: the stream's
    name whatever the deployment's key prefix and partition (the Redis key is an
    attribute of its own)."""
    return _consume(call, message, group, stream)


async def _consume(call: Awaitable[None], message: Message, group: str, destination: str) -> None:
    from opentelemetry.trace import SpanKind

    traceparent = message.fields.get("traceparent")
    known = None
    if not traceparent and _HEX32.fullmatch(message.trace_id) and int(message.trace_id, 16):
        known = _NEXT_TRACE.set(message.trace_id)  # a root span, in the event's trace
    span = _tracer.start_span(
        f"process {destination}",
        context=parent(traceparent),
        kind=SpanKind.CONSUMER,
        attributes=processing(message, group, destination),
    )
    if known is not None:
        _NEXT_TRACE.reset(known)
    await within(span, call, message.key)


def processing(message: Message, group: str, destination: str) -> dict[str, Any]:
    """The attributes of a span processing ``message`` for ``group``."""
    return {
        "messaging.system": "redis",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": destination,
        "messaging.consumer.group.name": group,
        "messaging.message.id": message.event_id,
        "sluice.stream.entry_id": message.entry_id,
        "sluice.stream.key": message.origin,
        "sluice.event.type": message.type,
        "sluice.delivery.attempt": message.deliveries,
    }


def start_root(name: str, trace_id: str, linked: str | None, **options: Any) -> Any:
    """A span with no parent (``options``: kind, attributes), in the trace ``trace_id``
    when that is a trace id (else a new trace), linked to the span ``linked`` names (a
    traceparent) if any: a task's or a job's run."""
    known = _NEXT_TRACE.set(trace_id) if _HEX32.fullmatch(trace_id) and int(trace_id, 16) else None
    links = [link] if (link := link_to(linked)) is not None else []
    try:
        return _tracer.start_span(name, context=parent(None), links=links, **options)
    finally:
        if known is not None:
            _NEXT_TRACE.reset(known)


def link_to(traceparent: str | None) -> Any:
    """A span link to the span ``traceparent`` names (None for none). Written by
    ``current_traceparent``, so parsed by position, not by the propagator, and with no
    attributes, which would triple its cost (the relay makes one link per event: about
    5 us, against 16 us so and 50 us for a span per event)."""
    from opentelemetry.trace import Link, SpanContext, TraceFlags

    if not traceparent or len(traceparent) != 55:
        return None
    return Link(
        SpanContext(
            int(traceparent[3:35], 16),
            int(traceparent[36:52], 16),
            is_remote=True,
            trace_flags=TraceFlags(int(traceparent[53:], 16)),
        )
    )


def links_to(traceparents: Iterable[str | None]) -> list[Any]:
    """A link to each span of ``traceparents``, once each (the events a request appended
    together, an order and its lines, are one link), the first as many as a span keeps:
    the SDK would drop the others after they were made."""
    links: list[Any] = []
    for tp in dict.fromkeys(traceparents):
        if _max_links is not None and len(links) >= _max_links:
            break
        if (link := link_to(tp)) is not None:
            links.append(link)
    return links


@contextmanager
def producing(events: Sequence[StoredEvent]) -> Iterator[None]:
    """A PRODUCER span for one batch the relay publishes, linked to the span that
    appended each of its events (a batch carries events of many traces: links, not a
    parent). The SDK keeps at most ``OTEL_SPAN_LINK_COUNT_LIMIT`` links (128)."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    links = links_to(event.traceparent for event in events)
    streams = {e.aggregate for e in events}
    span = _tracer.start_span(
        "publish" if len(streams) != 1 else f"publish {next(iter(streams))}",
        kind=SpanKind.PRODUCER,
        links=links,
        attributes={
            "messaging.system": "redis",
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
            "messaging.batch.message_count": len(events),
            **({"messaging.destination.name": next(iter(streams))} if len(streams) == 1 else {}),
        },
    )
    try:
        yield
    except BaseException as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__qualname__}: {exc}"))
        raise
    finally:
        span.end()
