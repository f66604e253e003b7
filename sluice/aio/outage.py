"""What counts as Redis being unavailable, for every loop that waits it out."""

from __future__ import annotations

import redis.exceptions

# The exceptions that mean Redis is down or failing over: an outage to wait out, not a
# bug.
#
# NoScriptError: Redis restarted between a script's load and its run; the next
# call loads it again, so it is an outage like the others, not a bug.
#
# A Redis Cluster in a failover: CLUSTERDOWN (MasterDownError is one), TRYAGAIN and
# "TTL exhausted" (ClusterError) come from the nodes; SlotNotCoveredError and
# RedisClusterException ("cannot be connected", "all slots are not covered") from the
# client, and are not RedisErrors. A cross-slot command is a RedisClusterException
# too: a bug, but then a warning on every try rather than a task dead in silence.
REDIS_DOWN = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.NoScriptError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.RedisClusterException,
    OSError,
)
