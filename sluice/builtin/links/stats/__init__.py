"""The ``link-stats`` projection (per-link, per-day visit counts) and its reads."""
