"""Outgoing mail: templates, idempotency keys, the shared rate limit and the transports.

Handlers call ``sluice.builtin.accounts.mail.sending.Mailer.send_once``; everything else here is
what it is made of. This package uses the store and Redis, never handlers.
"""
