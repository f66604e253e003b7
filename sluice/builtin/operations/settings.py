"""The operations app's settings (``SLUICE_*``, described in .env.example and
docs/reference/configuration.md)."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from sluice.app import Settings

# Where the trace id goes in SLUICE_TRACE_URL.
TRACE_ID = "{trace_id}"


class OperationsSettings(Settings, frozen=True, kw_only=True):
    """The /admin page: where a trace opens in the team's tracing UI."""

    # A URL template with {trace_id}: /admin links each trace there (docs/guides/tracing.md).
    trace_url: str = ""

    def __post_init__(self) -> None:
        if self.trace_url and not _template(self.trace_url):  # refuses the start
            raise ValueError(
                f"SLUICE_TRACE_URL must be an http:// or https:// URL containing {TRACE_ID},"
                f" such as http://localhost:16686/trace/{TRACE_ID}; got {self.trace_url!r}"
            )

    def trace_link(self, trace_id: str) -> str | None:
        """The trace's page in the tracing UI (None when SLUICE_TRACE_URL is unset)."""
        if not self.trace_url:
            return None
        return self.trace_url.replace(TRACE_ID, quote(trace_id, safe=""))


def _template(text: str) -> bool:
    if TRACE_ID not in text or not (text.isascii() and text.isprintable()) or " " in text:
        return False
    try:
        parts = urlsplit(text)
    except ValueError:  # an unclosed [ of an IPv6 host
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
