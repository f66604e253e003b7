"""The accounts app's Redis keys (the strings the core's ``Keys`` gave them before: the
budgets and the rate slot in Redis keep working)."""

from __future__ import annotations

from sluice.app import RedisKeys


class AccountsKeys(RedisKeys):
    """The mail's rate slot and budgets."""

    __slots__ = ()

    def mail_rate(self) -> str:
        """The next free send slot of the mail rate limit, shared by every mail worker."""
        return f"{self.prefix}:mail:rate"

    def mail_domain_rate(self, domain: str) -> str:
        """When one recipient domain's next mail is due (the domain rate's GCRA)."""
        return f"{self.prefix}:mail:domain:{domain}"

    def mail_budget(self, user_id: str) -> str:
        """The keys of the mails sent to one user in the last day (the per-user budget)."""
        return f"{self.prefix}:mail:budget:{user_id}"
