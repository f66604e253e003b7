"""The reminders app's Redis keys (the strings the core's ``Keys`` gave them before)."""

from __future__ import annotations

from sluice.app import RedisKeys


class RemindersKeys(RedisKeys):
    """Occurrence claims."""

    __slots__ = ()

    def reminder_occurrence(self, reminder_id: str, slot: str) -> str:
        """Claimed by the runner that mails this occurrence (``slot``: its UTC instant)."""
        return f"{self.prefix}:reminder:{reminder_id}:slot:{slot}"
