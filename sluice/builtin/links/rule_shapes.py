"""The shape of a link's redirect rules, as stored, carried by events and cached.

Kept apart from ``sluice.builtin.links.targeting`` (which checks and chooses) so that the
store and the events can name a rule without importing the User-Agent parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

from sluice.builtin.links.rules import URL_MAX

Device = Literal["mobile", "tablet", "desktop"]
System = Literal["android", "ios", "windows", "macos", "linux"]
Language = Annotated[str, msgspec.Meta(pattern="^[a-z]{2,3}$")]
Country = Annotated[str, msgspec.Meta(pattern="^[A-Z]{2}$")]


class When(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The conditions of a rule; absent ones hold for everyone."""

    device: Device | None = None
    os: System | None = None
    language: Language | None = None
    country: Country | None = None


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """Where a redirect goes when ``when`` holds; a link's first rule that holds wins."""

    when: When
    url: Annotated[str, msgspec.Meta(max_length=URL_MAX)]


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(tuple[Rule, ...])


def encode_rules(rules: Sequence[Rule]) -> str | None:
    """Rules as JSON text to store; None for no rules (a NULL column)."""
    return _ENCODER.encode(tuple(rules)).decode() if rules else None


def decode_rules(text: str | bytes | None) -> tuple[Rule, ...]:
    """Stored rules back; NULL or empty text is no rules."""
    return _DECODER.decode(text) if text else ()
