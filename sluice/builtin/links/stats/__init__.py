"""The ``link-stats`` projection (per-link, per-day visit counts, facets, owners' days)
and the reads of its tables. Imports the projection engine and this app's events."""
