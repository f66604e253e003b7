"""The accounts app's settings: its tokens and the mail sluice sends
(``SLUICE_*``, described in .env.example and docs/reference/configuration.md)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from sluice.app import Rate, Settings


class AccountsSettings(Settings, frozen=True, kw_only=True):
    """Users' tokens and mail."""

    token_ttl_seconds: int = 30 * 86_400
    smtp_url: str | None = None
    mail_from: str = "sluice@localhost"
    mail_rate: float = 50.0
    # Mails to one user in any hour / any 24 hours, shared by every replica (0: no limit).
    mail_user_hourly: Annotated[int, Meta(ge=0)] = 20
    mail_user_daily: Annotated[int, Meta(ge=0)] = 100
    # Mails to one recipient domain, shared by every replica: "100/min", "5/s" ("" or
    # "0": no limit). A mail over it waits for its turn without spending a delivery.
    mail_domain_rate: str = ""

    def __post_init__(self) -> None:
        try:
            self.domain_rate()
        except ValueError:  # refuses the start
            raise ValueError(
                'SLUICE_MAIL_DOMAIN_RATE must be a rate such as "100/min" or "5/s" (0: no'
                f" limit), got {self.mail_domain_rate!r}"
            ) from None

    def domain_rate(self) -> Rate | None:
        """``mail_domain_rate`` as a ``Rate`` (None: no limit)."""
        text = self.mail_domain_rate.strip()
        return Rate.parse(text) if text else None
