"""The accounts app's Redis keys, under the deployment's prefix (the same strings as when
the core's ``Keys`` named them: the budgets and the rate slot in Redis keep working)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MailKeys:
    """The mail's keys under ``prefix`` (``SLUICE_STREAM_PREFIX``)."""

    prefix: str

    def rate(self) -> str:
        """The next free send slot of the mail rate limit, shared by every mail worker."""
        return f"{self.prefix}:mail:rate"

    def budget(self, user_id: str) -> str:
        """The keys of the mails sent to one user in the last day (the per-user budget)."""
        return f"{self.prefix}:mail:budget:{user_id}"
