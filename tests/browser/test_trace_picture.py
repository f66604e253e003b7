"""The picture of a trace in docs/guides/tracing.md, and what it shows, in headless
Chromium: a registration traced with OpenTelemetry (the SDK's in-memory exporter), its
welcome mail sent by the ``mail`` group, seen on /admin with SLUICE_TRACE_URL set: the
trace's events, their deliveries and the link to the tracing UI, whose spans are the
request's SERVER span with the handler's CONSUMER span under it.

``SLUICE_UPDATE_SCREENSHOT=1`` copies the trace panel's screenshot to
docs/assets/admin-otel-trace.png and writes the spans, as a tracing UI lists them, into
the guide's text block beside it; without it, the block must show the same spans.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.browser.admin_page import ADMIN_TOKEN, WAIT_MS, sign_in

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.topologies("single")

DOCS = Path(__file__).resolve().parents[2] / "docs"
ASSETS, GUIDE = DOCS / "assets", DOCS / "guides" / "tracing.md"
MARKER = "<!-- spans of the picture: tests/browser/test_trace_picture.py -->"
TEMPLATE = "http://localhost:16686/trace/{trace_id}"


def span_lines(found: Sequence[ReadableSpan]) -> list[str]:
    """The spans as a tracing UI lists them: a tree of parents and children, each with
    its kind, its start from the trace's start and its duration."""
    ids = {s.context.span_id: s for s in found}
    start = min(s.start_time or 0 for s in found)
    lines: list[str] = []

    def draw(span: ReadableSpan, depth: int) -> None:
        indent = "    " * (depth - 1) + "└── " if depth else ""
        begun = ((span.start_time or 0) - start) / 1e6
        took = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        lines.append(
            f"{indent + span.name:<34}{span.kind.name:<10}{f'+{begun:.1f} ms':>10}{took:>8.1f} ms"
            f"  {_about(span, ids)}".rstrip()
        )
        for child in sorted(
            (s for s in found if s.parent is not None and s.parent.span_id == span.context.span_id),
            key=lambda s: s.start_time or 0,
        ):
            draw(child, depth + 1)

    for root in sorted(
        (s for s in found if s.parent is None or s.parent.span_id not in ids),
        key=lambda s: s.start_time or 0,
    ):
        draw(root, 0)
    return lines


def _about(span: ReadableSpan, ids: dict[int, ReadableSpan]) -> str:
    attributes = span.attributes or {}
    if span.kind == SpanKind.SERVER:
        return f"status {attributes.get('http.response.status_code')}"
    if span.kind == SpanKind.CONSUMER:
        return (
            f"group {attributes.get('messaging.consumer.group.name')},"
            f" attempt {attributes.get('sluice.delivery.attempt')}"
        )
    linked = [ids[link.context.span_id].name for link in span.links if link.context.span_id in ids]
    return f"links {', '.join(linked)}" if linked else ""


async def test_a_traced_registration_on_admin_links_to_its_trace(
    page: Page,
    aiohttp_server: Any,
    aiohttp_client: Any,
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    spans: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    from playwright.async_api import expect

    config = make_config(admin_token=ADMIN_TOKEN, trace_url=TEMPLATE)
    server = await aiohttp_server(create_app(config))
    client = await aiohttp_client(server)
    response = await client.post(
        "/v1/users", json={"email": "ada@example.com", "password": "correct horse battery"}
    )
    assert response.status == 201, await response.text()
    trace_id = response.headers["X-Trace-Id"]
    start_relay()
    start_worker("mail", name="m1")

    def consumed() -> list[ReadableSpan]:
        return [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]

    async def mailed() -> bool:
        return bool(consumed()) and any(
            s.kind == SpanKind.PRODUCER for s in spans.get_finished_spans()
        )

    await wait_for(mailed, timeout=30)
    finished = spans.get_finished_spans()
    found = [s for s in finished if f"{s.context.trace_id:032x}" == trace_id]
    (request,) = [s for s in found if s.kind == SpanKind.SERVER]
    (mail,) = consumed()
    assert request.name == "POST /v1/users"
    assert mail.parent is not None and mail.parent.span_id == request.context.span_id
    assert (mail.attributes or {}).get("messaging.consumer.group.name") == "mail"
    # The relay's batch, a trace of its own, linked to the request's span.
    (publish,) = [
        s
        for s in finished
        if s.kind == SpanKind.PRODUCER
        and request.context.span_id in {link.context.span_id for link in s.links}
    ]
    found.append(publish)

    await sign_in(page, str(server.make_url("/admin")), ADMIN_TOKEN)
    await page.get_by_label("Trace id").fill(trace_id)
    await page.get_by_role("button", name="Search").click()
    events = page.locator("#events tbody tr")
    await expect(events).to_have_count(1, timeout=WAIT_MS)
    await events.first.locator("td").first.click()
    await page.locator("#event-panel").get_by_role("button", name=f"Show trace {trace_id}").click()
    trace = page.locator("#trace-panel")
    await expect(trace.locator("#trace-title")).to_have_text(f"Trace {trace_id}")
    link = trace.get_by_role("link", name="Open in localhost:16686")
    await expect(link).to_have_attribute("href", f"http://localhost:16686/trace/{trace_id}")
    story = trace.locator("article")
    await expect(story).to_have_count(1)
    await expect(story.first).to_contain_text("UserRegistered")
    await expect(story.first.locator("tbody tr")).to_contain_text("handled", timeout=WAIT_MS)

    shot = tmp_path / "admin-otel-trace.png"
    await trace.scroll_into_view_if_needed()
    await trace.screenshot(path=shot)
    assert shot.read_bytes().startswith(b"\x89PNG")
    lines = span_lines(found)
    if os.environ.get("SLUICE_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, ASSETS / "admin-otel-trace.png")
        GUIDE.write_text(with_spans(GUIDE.read_text(), lines))
    # The guide's text shows these spans (their timings are the picture's run's).
    assert [_shape(line) for line in spans_shown(GUIDE.read_text())] == list(map(_shape, lines))


def _block(guide: str) -> tuple[int, int]:
    """Where the text block after the guide's MARKER starts and ends (its lines)."""
    start = guide.index(MARKER)
    opened = guide.index("```text\n", start) + len("```text\n")
    return opened, guide.index("```", opened)


def spans_shown(guide: str) -> list[str]:
    """The span lines of the guide's block beside the picture."""
    start, end = _block(guide)
    return guide[start:end].splitlines()


def with_spans(guide: str, lines: list[str]) -> str:
    start, end = _block(guide)
    return guide[:start] + "".join(f"{line}\n" for line in lines) + guide[end:]


def _shape(line: str) -> str:
    """A span line without its timings."""
    return " ".join(re.sub(r"\+[\d.]+ ms +[\d.]+ ms", "", line).split())
