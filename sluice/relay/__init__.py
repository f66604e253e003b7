"""The relay: committed events from the store's outbox to their Redis streams
(``relay``), the publishing itself (``publisher``) and the wake-ups (``notify``)."""
