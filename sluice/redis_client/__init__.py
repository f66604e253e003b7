"""The Redis Cluster client (``cluster``) and commands packed by hiredis
in one call (``packing``)."""
