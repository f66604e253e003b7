"""The ``link-stats`` projection's tables, as templates with ``{s}``: the suffix is empty
for the live tables and a generation tag while ``sluice replay`` rebuilds them. The links
app's migrations (``sluice.builtin.links.migrations``) make the live ones; the
projection (``sluice.builtin.links.stats.projection``) builds fresh copies in a replay."""

from __future__ import annotations

# Link statistics, pre-aggregated per link; unique visitors are exact: one row
# per (link, visitor) and per (link, day, visitor), counted as they are inserted.
LINK_STATS_DDL = """
CREATE TABLE link_stats{s} (
    code TEXT PRIMARY KEY,
    total INTEGER NOT NULL,
    bots INTEGER NOT NULL,
    unique_visitors INTEGER NOT NULL,
    updated_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE link_stats_days{s} (
    code TEXT NOT NULL,
    day TEXT NOT NULL,
    visits INTEGER NOT NULL,
    unique_visitors INTEGER NOT NULL,
    PRIMARY KEY (code, day)
) WITHOUT ROWID;
CREATE TABLE link_stats_referrers{s} (
    code TEXT NOT NULL,
    referrer TEXT NOT NULL,
    visits INTEGER NOT NULL,
    PRIMARY KEY (code, referrer)
) WITHOUT ROWID;
CREATE TABLE link_stats_browsers{s} (
    code TEXT NOT NULL,
    browser TEXT NOT NULL,
    visits INTEGER NOT NULL,
    PRIMARY KEY (code, browser)
) WITHOUT ROWID;
CREATE TABLE link_visitors{s} (
    code TEXT NOT NULL,
    visitor TEXT NOT NULL,
    PRIMARY KEY (code, visitor)
) WITHOUT ROWID;
CREATE TABLE link_day_visitors{s} (
    code TEXT NOT NULL,
    day TEXT NOT NULL,
    visitor TEXT NOT NULL,
    PRIMARY KEY (code, day, visitor)
) WITHOUT ROWID;
CREATE TABLE link_stats_processed{s} (
    event_id TEXT PRIMARY KEY
) WITHOUT ROWID;
"""

# Link statistics of any UTC day range (docs/guides/links.md), added by the links app's step 12
# (which replaces sluice's migration 24) to the tables above, which stay as its step 2 (sluice's 6)
# made them: a fresh database runs 2, then 12; a replay runs both templates. Per day: the bots;
# link_day_facets counts visits per (day, facet, value), facet one of referrer, browser, country,
# os, device, value '' when unknown; link_owner_days counts each owner's links per day, for the
# owner's busiest links of a range.
LINK_STATS_RANGES_DDL = """
ALTER TABLE link_stats_days{s} ADD COLUMN bots INTEGER NOT NULL DEFAULT 0;
CREATE TABLE link_day_facets{s} (
    code TEXT NOT NULL,
    day TEXT NOT NULL,
    facet TEXT NOT NULL,
    value TEXT NOT NULL,
    visits INTEGER NOT NULL,
    PRIMARY KEY (code, day, facet, value)
) WITHOUT ROWID;
CREATE TABLE link_owner_days{s} (
    owner_id TEXT NOT NULL,
    day TEXT NOT NULL,
    code TEXT NOT NULL,
    visits INTEGER NOT NULL,
    bots INTEGER NOT NULL,
    PRIMARY KEY (owner_id, day, code)
) WITHOUT ROWID;
"""
