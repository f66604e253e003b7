"""structlog setup: JSON lines, or console rendering on a terminal."""

from __future__ import annotations

import logging
import sys

import structlog

from sluice.config import Config


def configure_logging(config: Config) -> None:
    level = logging.getLevelNamesMapping().get(config.log_level.upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer()
        if config.log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        # Configured once per process, before any logging: cache the bound loggers
        # instead of rebuilding a proxy on every call (it showed in the redirect profile).
        cache_logger_on_first_use=True,
    )
    # Libraries log through the standard library; keep their warnings visible.
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr)
