"""The app's tests run on sluice's test plugin: a private Redis and store per test (both
stores), and the app's real processes. The app is imported from ``src`` without being
installed, here and in the processes the tests start."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parent / "src")
sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))

pytest_plugins = ["sluice.app.testing"]
