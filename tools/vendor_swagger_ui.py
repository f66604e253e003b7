"""Vendor Swagger UI (the npm package ``swagger-ui-dist``) into sluice/http/static/swagger-ui/.

``python -m tools.vendor_swagger_ui 5.36.0`` replaces the files ``GET /docs`` serves with
those of that release, through ``npm pack`` (the registry's own client). Vendored, not a
PyPI dependency: swagger-ui-bundle, the package the Python frameworks use, still ships
Swagger UI 4, which cannot read an OpenAPI 3.1 document (sluice's); the forks that ship 5
are repackagings of unclear provenance with template engines we do not need.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "sluice" / "http" / "static" / "swagger-ui"
# What the page loads, and the licences that must travel with it.
FILES = (
    "swagger-ui-bundle.js",
    "swagger-ui-bundle.js.LICENSE.txt",
    "swagger-ui.css",
    "LICENSE",
    "NOTICE",
)


def vendor(version: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            ["npm", "pack", "--silent", f"swagger-ui-dist@{version}"],
            cwd=scratch,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        [archive] = Path(scratch).glob("swagger-ui-dist-*.tgz")
        TARGET.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            for name in FILES:
                member = tar.extractfile(f"package/{name}")
                assert member is not None, name
                (TARGET / name).write_bytes(member.read())
    (TARGET / "VERSION").write_text(f"{version}\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tools.vendor_swagger_ui VERSION (of swagger-ui-dist)")
    vendor(sys.argv[1])
