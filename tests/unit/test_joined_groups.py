"""An app joins another app's group through the group object it exports
(docs/guides/write-an-app.md, "Joining another app's group"): its handlers run in that
group, whose streams follow, and an event type still has one handler per group."""

from __future__ import annotations

from typing import ClassVar

import pytest

from sluice.app import App, Event, HandlerContext, Resources, Tx
from sluice.app.running import group_aggregates


class ParcelSent(Event, frozen=True, kw_only=True, tag="test.ParcelSent"):
    aggregate: ClassVar[str] = "parcels"
    parcel_id: str


class CardRedeemed(Event, frozen=True, kw_only=True, tag="test.CardRedeemed"):
    aggregate: ClassVar[str] = "cards"
    card_id: str


def test_another_apps_handler_joins_a_group_and_its_streams() -> None:
    owner = App("parcels")
    tracking = owner.group("tracking")
    App("cards", requires=("parcels",))

    @tracking.once(ParcelSent)
    async def sent(event: ParcelSent, tx: Tx, ctx: HandlerContext) -> None: ...

    @tracking.once(CardRedeemed)
    async def redeemed(event: CardRedeemed, tx: Tx, ctx: HandlerContext) -> None: ...

    assert tracking.event_types == (ParcelSent, CardRedeemed)
    assert group_aggregates(tracking) == ("cards", "parcels")
    with pytest.raises(ValueError, match="handles CardRedeemed twice"):
        tracking.once(CardRedeemed)


def test_a_group_with_deps_is_joined_through_the_object_its_declaration_returns() -> None:
    def build(resources: Resources) -> str:
        raise AssertionError("not built here")

    owner = App("parcels")
    outbox = owner.group("outbox", deps=build)

    @outbox.on(CardRedeemed)
    async def redeemed(event: CardRedeemed, ctx: HandlerContext[str]) -> None: ...

    assert owner.groups == {"outbox": outbox}
    assert outbox.handlers == {CardRedeemed: redeemed}
    with pytest.raises(ValueError, match="handles CardRedeemed twice"):
        outbox.on(CardRedeemed)


def test_the_reminders_app_mails_through_the_accounts_apps_mail_group() -> None:
    from sluice.builtin.accounts import app as accounts
    from sluice.builtin.accounts import mail_group
    from sluice.builtin.reminders.events import ReminderDue
    from sluice.builtin.reminders.mail import on_reminder_due

    assert accounts.groups["mail"] is mail_group
    assert mail_group.handlers[ReminderDue] is on_reminder_due
