"""An app's own Redis keys: a ``RedisKeys`` subclass of key builders, under the
deployment's prefix (``SLUICE_STREAM_PREFIX``), declared with ``App(keys=...)``."""

from __future__ import annotations

from typing import Self

from sluice.app.settings import Source, config_of


class RedisKeys:
    """The base of an app's key builders: methods that return ``f"{self.prefix}:..."``
    (a key shared by a script's other keys carries their hash tag, ``{...}``, so that on
    a Redis Cluster they share a slot)."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = "sluice") -> None:
        self.prefix = prefix

    @classmethod
    def of(cls, source: Source) -> Self:
        """The keys of the deployment of ``source`` (a context, a request, the API's
        ``web.Application``, the ``Resources`` or the ``Config``)."""
        return cls(config_of(source).stream_prefix)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RedisKeys)
            and type(other) is type(self)
            and other.prefix == self.prefix
        )

    def __hash__(self) -> int:
        return hash((type(self), self.prefix))
