"""Redis Streams transport (core): key names, the relay, the consumer-group runtime with
its retries and dead letters, and what the runtime records as it runs (deliveries,
pauses, cancels, stalls, the groups' history). Imports the store and events, no app."""
