"""Projections: read models built from events, deduplicated by event id."""
