"""Writing a script's figures into its section of ``bench/README.md``.

Each script owns a generated block between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``; the newest run goes first and the last few runs stay,
so two runs side by side can be read there. Text around the block (analysis,
profiles, before and after) is written by hand and left alone.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).with_name("README.md")
_RUN = "<!-- run -->"


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown cpu",
    )
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    version = re.search(r"v=(\S+)", out)
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}, "
        f"Redis {version[1] if version else '?'}"
    )


def command() -> str:
    """The command line that ran this script, as a user would type it."""
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):  # run from bench/ or elsewhere: say it from the root
        script = script.relative_to(README.parent.parent)
    return " ".join([".venv/bin/python", str(script), *sys.argv[1:]])


def record(name: str, title: str, body: str, *, keep: int = 4, extra: str = "") -> None:
    """Put ``body`` first in the generated block ``name``; add the section if it is new.

    ``extra`` is added to the machine line (the PostgreSQL server, for instance).
    """
    where = f"{machine()}, {extra}" if extra else machine()
    stamp = f"{datetime.date.today().isoformat()}, {where}, `{command()}`:\n\n"
    entry = stamp + body.strip() + "\n"
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        old, tail = rest.split(end, 1)
        runs = [r.strip() for r in old.split(_RUN) if r.strip()]
    else:
        head, tail, runs = text.rstrip() + f"\n\n## {title}\n\n", "\n", []
    runs = [entry.strip(), *runs][:keep]
    block = f"\n\n{_RUN}\n\n".join(runs)
    README.write_text(f"{head}{start}\n\n{block}\n\n{end}{tail}")
