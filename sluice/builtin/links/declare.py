"""What the links app declares on its ``App`` beyond its event types: routes (the
redirect's catch-all last), API contexts (the code pool, the link cache and its follower,
the visit writer, the password limits, the orphan tally), the redirect's fast path,
handler groups (exports, imports, webhooks), the ``link-stats`` projection, and its
cron tasks (the code pool's refill, the export results' retention)."""

from __future__ import annotations

from sluice.app import TaskContext
from sluice.builtin.links import pool
from sluice.builtin.links.app import app
from sluice.builtin.links.exports import group as exports_group  # noqa: F401  (declares it)
from sluice.builtin.links.exports.retention import purge_exports
from sluice.builtin.links.http import (
    counters,
    job_results,
    jobs,
    link_imports,
    link_passwords,
    link_qr,
    link_stats,
    links,
    orphan_visits,
    redirects,
    top_links,
    webhooks,
)
from sluice.builtin.links.http.fast import Redirects
from sluice.builtin.links.imports import group as imports_group  # noqa: F401  (declares it)
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.stats import projection  # noqa: F401  (declares link-stats)
from sluice.builtin.links.webhooks import group as webhooks_group  # noqa: F401  (declares it)
from sluice.builtin.tags import tagged

REFILL_BATCH = 1000

app.tag("links", "Short links: create, edit, follow (the redirect), stats, QR codes, imports")
app.tag("jobs", "Background jobs (exports, imports) and their results")
app.tag("webhooks", "A user's webhooks and their deliveries")
app.add_routes(
    tagged(
        (
            *top_links.ROUTES,  # before /v1/links/{code}, which would take "stats" for a code
            *links.ROUTES,
            *link_stats.ROUTES,
            *orphan_visits.ROUTES,
            *jobs.ROUTES,
            *job_results.ROUTES,
            *link_imports.ROUTES,
            *link_qr.ROUTES,
            *webhooks.ROUTES,
            # /{code} and the password form's POST /{code}: routed after every other
            # app's routes (sluice.http.openapi.routes_of), so they shadow none.
            *redirects.ROUTES,
            *link_passwords.ROUTES,
        )
    )
)
for context in (
    redirects.no_link_under_a_route,  # first: a refusal starts nothing
    links.code_pool,
    redirects.follow_links,
    redirects.record_visits,
    link_passwords.password_limits,
    orphan_visits.count_orphans,
    counters.publish_counters,
):
    app.api_context(context)
app.fast_path(Redirects)


@app.task(
    "refill-code-pool",
    cron=lambda config: LinksSettings.of(config).refill_code_pool_cron,
    timezone=lambda config: LinksSettings.of(config).refill_code_pool_timezone,
    description="tops the short-code pool up to SLUICE_CODE_POOL_TARGET",
)
async def refill_code_pool(ctx: TaskContext) -> None:
    """Top the code pool up to SLUICE_CODE_POOL_TARGET, 1000 codes per transaction.

    No cursor: each batch reads the free count in its own transaction, so a run
    interrupted midway continues from the pool's state.
    """
    settings = LinksSettings.of(ctx)
    added = await pool.refill(ctx.resources.store, settings.code_pool_target, batch=REFILL_BATCH)
    ctx.log.info("code pool refilled", added=added, target=settings.code_pool_target)


app.task(
    "purge-exports",
    cron=lambda config: LinksSettings.of(config).purge_exports_cron,
    timezone=lambda config: LinksSettings.of(config).purge_exports_timezone,
    description="removes export results older than SLUICE_EXPORT_RETENTION (their jobs answer 410)",
)(purge_exports)
