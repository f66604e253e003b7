"""``SLUICE_SMTP_URL``: ``smtp://[user:password@]host[:port][?starttls=true]``.

``smtps://`` connects with TLS from the first byte (implicit TLS, port 465 by
default); ``smtp://`` speaks plain SMTP and upgrades with STARTTLS when
``starttls=true`` (port 587 by default then, else 25). User and password are
percent-decoded, so ``p%40ss`` is ``p@ss``. ``timeout=SECONDS`` bounds each
SMTP command (30 by default). Any other query parameter is an error: a typo
must not silently send mail in the clear.

The password never appears in a message, a repr or a log line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.app import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    use_tls: bool = False  # smtps://: TLS from the start
    start_tls: bool = False  # smtp://...?starttls=true: upgrade before login
    timeout: float = 30.0

    def redacted(self) -> str:
        """The URL for logs: the password replaced by ``***``."""
        scheme = "smtps" if self.use_tls else "smtp"
        user = f"{self.username}:***@" if self.username else ""
        query = "?starttls=true" if self.start_tls else ""
        return f"{scheme}://{user}{self.host}:{self.port}{query}"


def _flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"SLUICE_SMTP_URL: {name} must be true or false, got {raw!r}")


def _options(query: str) -> tuple[bool, float]:
    start_tls, timeout = False, 30.0
    for name, raw in parse_qsl(query, keep_blank_values=True):
        if name == "starttls":
            start_tls = _flag(name, raw)
        elif name == "timeout":
            try:
                timeout = float(raw)
            except ValueError:
                timeout = -1.0
            if not 0 < timeout <= 600:
                raise ConfigError(f"SLUICE_SMTP_URL: timeout must be 0-600 seconds, got {raw!r}")
        else:
            raise ConfigError(
                f"SLUICE_SMTP_URL: unknown parameter {name!r} (known: starttls, timeout)"
            )
    return start_tls, timeout


def parse_smtp_url(url: str) -> SmtpSettings:
    """Parse ``SLUICE_SMTP_URL``; a ``ConfigError`` names the problem, never the password."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("smtp", "smtps"):
        raise ConfigError(f"SLUICE_SMTP_URL must start with smtp:// or smtps://, got {scheme!r}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number or out of range
        raise ConfigError("SLUICE_SMTP_URL has an invalid port") from None
    if not host:
        raise ConfigError("SLUICE_SMTP_URL has no host")
    if parts.path not in ("", "/") or parts.fragment:
        raise ConfigError("SLUICE_SMTP_URL takes no path or fragment")
    start_tls, timeout = _options(parts.query)
    use_tls = scheme == "smtps"
    if use_tls and start_tls:
        raise ConfigError("SLUICE_SMTP_URL: smtps:// is already TLS, starttls does not apply")
    if port is None:
        port = 465 if use_tls else 587 if start_tls else 25
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if (password is None) != (username is None):
        raise ConfigError("SLUICE_SMTP_URL needs both a user and a password, or neither")
    return SmtpSettings(
        host=host,
        port=port,
        username=username,
        password=password,
        use_tls=use_tls,
        start_tls=start_tls,
        timeout=timeout,
    )
