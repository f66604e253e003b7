"""Standard Webhooks secrets and signatures (https://www.standardwebhooks.com).

A secret is ``whsec_`` and the base64 of 24 to 64 random bytes; the signature of a
message is ``v1,`` and the base64 HMAC-SHA256, keyed with the secret's decoded bytes,
of ``{webhook-id}.{webhook-timestamp}.{body}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from sluice.app import SluiceError

PREFIX = "whsec_"
KEY_MIN, KEY_MAX = 24, 64
GENERATED_BYTES = 32


class BadSecret(SluiceError):
    """A secret that is not ``whsec_`` + base64 of 24 to 64 bytes."""


def generate_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(GENERATED_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The key bytes of ``secret``; ``BadSecret`` when it is not a Standard Webhooks one."""
    if not secret.startswith(PREFIX):
        raise BadSecret(f"must start with {PREFIX!r}, followed by base64")
    try:
        key = base64.b64decode(secret.removeprefix(PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise BadSecret(f"must be {PREFIX!r} followed by standard base64") from None
    if not KEY_MIN <= len(key) <= KEY_MAX:
        raise BadSecret(f"must hold {KEY_MIN} to {KEY_MAX} bytes once decoded, not {len(key)}")
    return key


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value."""
    signed = b"%s.%d.%s" % (message_id.encode("utf-8"), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")
