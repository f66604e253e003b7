"""The links app's Redis keys (the strings the core's ``Keys`` gave them before: what
Redis holds keeps working)."""

from __future__ import annotations

from sluice.app import RedisKeys


class LinksKeys(RedisKeys):
    """Cache hints, visit caps, password limits and export locks."""

    __slots__ = ()

    def links_changed_channel(self) -> str:
        """Pub/sub channel of the codes of committed link changes (cache hints)."""
        return f"{self.prefix}:links:changed"

    def link_visits(self, code: str) -> str:
        """GET redirects served of a link with max_visits (sluice/builtin/links/limits.py)."""
        return f"{self.prefix}:link:{{{code}}}:visits"

    def link_password_failures(self, digest: str) -> str:
        """Failed passwords of one link from one client (``digest``: of both), a sorted
        set as the core's login failures, tagged alike for the limiter's script."""
        return f"{self.prefix}:linkpw:failures:{{{digest}}}"

    def link_password_attempts(self, digest: str) -> str:
        """Password checks of one link from one client in progress."""
        return f"{self.prefix}:linkpw:attempts:{{{digest}}}"

    def export_lock(self, job_id: str) -> str:
        """Held by the one runner of an export job."""
        return f"{self.prefix}:export:{job_id}:lock"
