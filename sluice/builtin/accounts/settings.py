"""The accounts app's settings: its tokens and the mail sluice sends
(``SLUICE_*``, described in .env.example and docs/reference/configuration.md)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from sluice.app import Settings


class AccountsSettings(Settings, frozen=True, kw_only=True):
    """Users' tokens and mail."""

    token_ttl_seconds: int = 30 * 86_400
    smtp_url: str | None = None
    mail_from: str = "sluice@localhost"
    mail_rate: float = 50.0
    # Mails to one user in any hour / any 24 hours, shared by every replica (0: no limit).
    mail_user_hourly: Annotated[int, Meta(ge=0)] = 20
    mail_user_daily: Annotated[int, Meta(ge=0)] = 100
