"""What the runtime records as it runs and what operators act on: delivery
records (``attempts``, ``deliveries``, ``delivery_batches``), dead letters, pauses,
cancels, stalls, the groups' history and the streams' maintenance."""
