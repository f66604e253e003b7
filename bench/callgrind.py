"""Reading the instruction count of a ``callgrind_control -d`` dump.

``redirect_cost.py`` and ``consumer_cost.py`` run one process under callgrind with
``--callgrind-out-file=DIR/callgrind.out``, zero its counters, run the work, and dump
them once: that dump is ``DIR/callgrind.out.1`` (numbered files in the order written;
the file without a number is written at exit, counting everything since the zeroing).
"""

from __future__ import annotations

import re
from pathlib import Path


def dumped_instructions(directory: Path) -> int:
    """The instructions counted by the first numbered dump in ``directory``."""
    dump = min(directory.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
    total = re.search(r"^(?:summary|totals): (\d+)", dump.read_text(errors="replace"), re.M)
    if total is None:
        raise SystemExit(f"no instruction count in {dump}")
    return int(total[1])
