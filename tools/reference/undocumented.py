"""What stops generation: something the code has that its description lacks."""

from __future__ import annotations

from collections.abc import Sequence


class Undocumented(Exception):
    """Raised with every problem found at once, so one run names them all."""

    def __init__(self, page: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{page}: " + "; ".join(self.problems))
