"""The links app's settings (``SLUICE_*``, described in .env.example and
docs/reference/configuration.md)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from sluice.app import Settings

Positive = Annotated[int, Meta(ge=1)]


class LinksSettings(Settings, frozen=True, kw_only=True):
    """Short links: the code pool, visits, orphan visits, exports, imports, webhooks."""

    code_pool_target: int = 100_000
    # Visit group commit: commit when the oldest buffered visit is this old, or this many
    # wait; visits waiting for the database (an outage) beyond ``visit_buffer`` are dropped
    # and counted.
    visit_flush_ms: int = 5
    visit_batch: Positive = 500
    visit_buffer: Positive = 100_000
    # Orphan visits (GETs of unknown codes, docs/guides/links.md): written every this many
    # ms; at most this many distinct codes stored per UTC day (the rest count as "other");
    # days older than this many are deleted.
    orphan_flush_ms: Positive = 1_000
    orphan_codes_per_day: Positive = 1_000
    orphan_retention_days: Positive = 90
    refill_code_pool_cron: str = "0 0 4 * * *"
    refill_code_pool_timezone: str = "Asia/Shanghai"
    purge_exports_cron: str = "0 */15 * * * *"
    purge_exports_timezone: str = "UTC"
    # Exports: finished results are removed this many seconds after the job finished; a
    # job scans the event history in windows of this many sequence numbers; a user has at
    # most this many queued or running at once (docs/guides/security.md; 429 beyond).
    export_retention: int = 86_400
    export_batch: Positive = 10_000
    exports_per_user: Positive = 3
    # Link imports (docs/guides/imports.md): the largest CSV POST /v1/links/imports takes
    # (413 beyond); a user has at most this many queued or running at once (429 beyond,
    # answered before the upload is read).
    import_max_bytes: Positive = 10 * 1024 * 1024
    imports_per_user: Positive = 3
    # Links one user may own, however made (POST /v1/links answers 403 beyond; an import
    # reports the rows beyond as invalid). Links are never deleted.
    links_per_user: Positive = 100_000
    # Webhooks (docs/guides/links.md): per user; each call's deadline; how long a batch
    # waits for its calls before slow ones go on in the background (their entries
    # retried); 1: targets on private, loopback and link-local addresses allowed (tests,
    # private networks); calls at once to one receiver host, by every owner, worker and
    # host together (0: no bound; a call waiting for its turn is no failed attempt).
    webhooks_per_user: Positive = 10
    webhook_timeout_seconds: Annotated[float, Meta(gt=0)] = 10.0
    webhook_batch_wait_ms: int = 1000
    webhook_allow_private: int = 0
    webhook_host_concurrency: Annotated[int, Meta(ge=0)] = 8
