"""The repository's docs are the product's contract: code, docs and tests cite docs pages.

Users of sluice have the repository (its README, the docs site, the generated
references) and nothing else, so no file of it may send them to a document they do not
have, such as the product specification the project grew from (docs/index.md says the
pages are the contract).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The name of the specification, spelled so that this file does not cite it.
CITATION = re.compile(r"\b" + "SP" + r"EC\b")
# Vendored third-party files, not ours to word.
VENDORED = ("sluice/http/static/swagger-ui/",)


def test_no_file_of_the_repository_cites_a_document_users_do_not_have() -> None:
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    citing = []
    for name in files:
        if name.startswith(VENDORED):
            continue
        try:
            text = (ROOT / name).read_text("utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary (images), or deleted in the work tree
        citing += [
            f"{name}:{number}: {line.strip()[:100]}"
            for number, line in enumerate(text.splitlines(), 1)
            if CITATION.search(line)
        ]
    assert citing == [], "\n".join(["cite the docs page that says it instead:", *citing])
