"""The ``link-stats`` projection's tables, its schema steps as templates with ``{s}``: the
suffix is empty for the live tables and a generation tag while ``sluice replay`` rebuilds
them (``sluice.builtin.links.stats.projection``). Each step is as the links app's
migrations 2, 12 and 14 of release 3 made it (sluice's 6, 24 and 28 before them), so a
database made by an earlier release keeps its tables and records the steps as done."""

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

# Link statistics of any UTC day range (docs/guides/links.md), added by the second step (the
# links app's step 12 of release 3, sluice's migration 24 before it) to the tables above, which
# stay as the first step made them. Per day: the bots;
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

# The batch of each processed row (sluice/records/delivery_batches.py), the third step (the
# links app's step 14 of release 3, beside sluice's migration 28's delivery_batches table).
BATCH_IDS = "ALTER TABLE link_stats_processed{s} ADD COLUMN batch_id INTEGER;\n"
