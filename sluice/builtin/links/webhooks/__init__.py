"""Webhooks (docs/guides/links.md): users' endpoints that receive their links' events, signed the
Standard Webhooks way, from the ``webhooks`` handler group. See ``group`` for the
delivery design (one slow endpoint holds back only its own entries)."""
