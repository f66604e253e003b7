"""Group history (docs/guides/operate.md): per-minute handled, failed, dead-lettered and lag of
every handler group for the last 24 hours, kept in Redis within a fixed bound.

Not ``sluice.history`` (the event history's archive): this is the groups' throughput.
Every worker process samples its own consumers (``sampler``), and adds what they did
since its last sample to the minute's buckets (``buckets``), so any number of workers
add up; ``GET /v1/admin/history`` reads them (``reading``).
"""
