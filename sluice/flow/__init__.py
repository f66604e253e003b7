"""Flow control of a handler group by a key of each event: concurrency per key, rates
per key and overall, fair turns between keys, across every worker (docs/guides/write-an-app.md,
"Flow control")."""
