"""The SERVER span of a redirect answered on the fast path (``sluice.http.fast_redirect``,
``sluice.http.redirect_wire``), made where it is answered: the request middleware, which
makes every other request's span, never sees such a redirect (docs/guides/tracing.md).

Only made while ``tracing.ENABLED`` (its caller checks the flag first); the span has the
attributes the middleware's span of the same redirect would have but ``url.scheme`` and
``url.query``, which the fast path does not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.telemetry import tracing

ROUTE = "/{code}"


class RedirectSpan:
    """The span of one ``GET /{code}`` from ``headers`` and peer ``remote``: its trace id
    (the redirect's ``X-Trace-Id``) and its ``traceparent`` (the visit's) are known at
    once; ``end`` ends it with the answer's status."""

    __slots__ = ("span", "trace_id", "traceparent")

    def __init__(self, path: str, headers: Mapping[str, str], remote: str | None) -> None:
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            "http.request.method": "GET",
            "url.path": path,
            "http.route": ROUTE,
        }
        if agent := headers.get("User-Agent"):
            attributes["user_agent.original"] = agent
        if remote:
            attributes["client.address"] = remote
        self.span = tracing.tracer().start_span(
            f"GET {ROUTE}",
            context=tracing.parent(headers.get("traceparent")),
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        ctx = self.span.get_span_context()
        self.trace_id = f"{ctx.trace_id:032x}"
        self.traceparent = f"00-{self.trace_id}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    def end(self, status: int) -> None:
        """End the span, the redirect answered with ``status``."""
        self.span.set_attribute("http.response.status_code", status)
        self.span.end()
