"""What the relay, the consumer runtime and the records share about Redis Streams: the
Redis key names (``engine_keys``), partitions, stream entries (``messages``), what a
group runs (``spec``), group creation (``group_setup``) and the retry and dead-letter
moves (``failures``). Imports the store and events, no app."""
