"""``python -m tools.reference`` writes docs/reference/*.md; ``--check`` only compares."""

from __future__ import annotations

import sys

from tools.reference import generate, stale, write
from tools.reference.undocumented import Undocumented


def main(argv: list[str]) -> int:
    try:
        pages = generate()
    except Undocumented as exc:
        print(f"reference: cannot generate {exc}", file=sys.stderr)
        return 1
    if argv == ["--check"]:
        differences = stale(pages)
        for difference in differences:
            print(difference, file=sys.stderr)
        if differences:
            print("reference: run `make reference` and commit the pages", file=sys.stderr)
        return 1 if differences else 0
    if argv:
        print("usage: python -m tools.reference [--check]", file=sys.stderr)
        return 2
    changed = write(pages)
    print(f"reference: {len(pages)} pages, {len(changed)} rewritten: {', '.join(changed) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
