"""Redis Streams transport: names, relay, consumer-group runtime, maintenance."""
