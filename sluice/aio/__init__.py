"""General async helpers: waits that end at a stop (``waiting``), what counts as
Redis being down (``outage``), a Redis lock (``lock``)."""
