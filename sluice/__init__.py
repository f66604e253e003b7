"""sluice: an event-sourced backend service on Redis Streams."""

__version__ = "0.1.0"
