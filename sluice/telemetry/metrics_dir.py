"""Multiprocess metrics need their directory chosen before prometheus-client loads.

prometheus-client decides at import time whether values live in memory or in
files shared by processes, so ``sluice.cli.main`` calls ``prepare`` before it
imports anything that defines a metric. This module imports nothing of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from sluice.config import Config

ENV = "PROMETHEUS_MULTIPROC_DIR"


def metrics_dir(config: Config) -> Path:
    return config.data_dir / "metrics"


def prepare(config: Config, *, fresh: bool = False) -> None:
    """Point every sluice process on this data dir at one metrics directory.

    ``fresh`` (``sluice up``, which starts every component itself) removes the
    files of earlier runs, so counters start at zero with the deployment. An
    operator-set PROMETHEUS_MULTIPROC_DIR is used as is.
    """
    if os.environ.get(ENV):
        return
    directory = metrics_dir(config)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if fresh:
        for stale in directory.glob("*.db"):
            stale.unlink(missing_ok=True)
    os.environ[ENV] = str(directory)
