"""Every Redis key sluice uses, under one configurable prefix.

The stream keys are per partition (``sluice.streams.partitions``). With one partition
on a single Redis they are the names of release 1 (``sluice:orders``); otherwise each
partition's keys carry its hash tag (``sluice:{3.0}:orders``), so that one script or
one ``XREADGROUP`` over a partition's streams touches one cluster slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.streams.partitions import partition_of, tag


@dataclass(frozen=True)
class Keys:
    """The names of every Redis key and stream of a deployment, from its prefix, its
    partitions and whether keys carry a hash tag (Redis Cluster)."""

    prefix: str = "sluice"
    partitions: int = 1
    # Hash-tagged even with one partition (a Redis Cluster needs the tag for that).
    tagged: bool = False

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError("at least one partition")

    @property
    def numbers(self) -> range:
        """Every partition's number."""
        return range(self.partitions)

    def partition_of(self, aggregate_id: str) -> int:
        """The partition of an aggregate (by its key field: an order's id...)."""
        return partition_of(aggregate_id, self.partitions)

    def space(self, partition: int = 0) -> str:
        """The prefix of one partition's stream keys."""
        if self.partitions == 1 and not self.tagged:
            return self.prefix
        return f"{self.prefix}:{{{tag(partition, self.partitions)}}}"

    def stream(self, aggregate: str, partition: int = 0) -> str:
        """The stream of one aggregate type in one partition, e.g. ``sluice:orders``."""
        return f"{self.space(partition)}:{aggregate}"

    def retry(self, group: str, partition: int = 0) -> str:
        """Retries of one group in one partition; only that group reads it."""
        return f"{self.space(partition)}:retry:{group}"

    def dead(self, group: str, partition: int = 0) -> str:
        """The stream of ``group``'s dead letters in ``partition``."""
        return f"{self.space(partition)}:dead:{group}"

    def delayed(self, group: str, partition: int = 0) -> str:
        """Sorted set of retries waiting for their backoff, scored by due time (ms)."""
        return f"{self.space(partition)}:delayed:{group}"

    def acks(self, group: str, partition: int = 0) -> str:
        """Hash of each consumer's last ack (unix ms) in one partition: the stall check."""
        return f"{self.space(partition)}:acks:{group}"

    def history(self, group: str, metric: str, hour: str) -> str:
        """A hash of one group's per-minute ``metric`` in one UTC hour (``2026010112``),
        field: the minute of the hour. Tagged by the group: a group's history is in one
        cluster slot, so one script writes all of a sample."""
        return f"{self.prefix}:history:{{{group}}}:{metric}:{hour}"

    def flow(self, group: str) -> str:
        """The prefix of one group's flow-control keys (``sluice.flow.scripts``), tagged by
        the group: all of a group's flow state is in one cluster slot, for its scripts."""
        return f"{self.prefix}:flow:{{{group}}}:"

    def slots(self, name: str, key: str) -> str:
        """The prefix of one key's slots of the semaphore ``name`` (``sluice.flow.slots``),
        tagged by the key: its holders and waiters are in one cluster slot, for its
        scripts, and different keys spread over the cluster."""
        return f"{self.prefix}:slots:{name}:{{{key}}}:"

    def relay_lock(self) -> str:
        """The lock the relay holds: one relay publishes at a time."""
        return f"{self.prefix}:relay:lock"

    def outbox_channel(self) -> str:
        """Pub/sub channel that wakes the relay when an API process commits events."""
        return f"{self.prefix}:outbox"

    def login_failures(self, email_digest: str) -> str:
        """A sorted set of a login subject's failure times (``LoginLimiter``)."""
        # A sorted set of failure times (before: a counter under :login:fail:). Tagged by
        # the digest, as ``login_attempts``: the limiter's script takes both, so they
        # share a cluster slot. (The tag renamed the keys: an upgrade forgets the
        # failures and attempts of the last fifteen minutes, once.)
        return f"{self.prefix}:login:failures:{{{email_digest}}}"

    def login_attempts(self, email_digest: str) -> str:
        """A sorted set of the login attempts in progress (token, start time)."""
        return f"{self.prefix}:login:attempts:{{{email_digest}}}"

    def login_email_failures(self, email_digest: str) -> str:
        """An email's failed logins from every client (a sorted set as ``login_failures``;
        that one's subject is the email and the client address)."""
        return f"{self.prefix}:login:email-failures:{{{email_digest}}}"

    def login_email_attempts(self, email_digest: str) -> str:
        """An email's login attempts in progress from every client (as ``login_attempts``)."""
        return f"{self.prefix}:login:email-attempts:{{{email_digest}}}"

    def login_known(self, pair_digest: str) -> str:
        """Set while a client address logged in to an email within the last 30 days."""
        return f"{self.prefix}:login:known:{pair_digest}"

    def client_limit(self, kind: str, address_digest: str) -> str:
        """One client address's bucket of logins, registrations or admin failures."""
        return f"{self.prefix}:client:{kind}:{address_digest}"

    def task_lock(self, task: str) -> str:
        """Held by the one run of ``task`` in progress, cron or manual, on any replica."""
        return f"{self.prefix}:task:{task}:lock"

    def task_occurrence(self, task: str, slot: str) -> str:
        """Claimed by the replica that takes this occurrence (``slot``: its UTC instant)."""
        return f"{self.prefix}:task:{task}:slot:{slot}"

    def cancel(self, kind: str, target_id: str) -> str:
        """Set when an operator or owner cancels ``kind``'s ``target_id`` (an export job,
        a task run): its runner polls it (``sluice.records.cancel``)."""
        return f"{self.prefix}:cancel:{kind}:{target_id}"
