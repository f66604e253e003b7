"""A short URL as a QR code image (segno): SVG or PNG, a size in pixels per module.

Error correction M (15% of the symbol may be lost), raised by segno when the
version has room to spare; the smallest version that holds the URL; a quiet zone
of 4 modules, as ISO/IEC 18004 asks. The image is ``(modules + 8) * scale``
pixels wide, so a short URL of this service (version 2 or 3: 25 to 29 modules)
at the default scale 8 is 264 to 296 pixels.
"""

from __future__ import annotations

import io
from typing import Literal

import segno

QrFormat = Literal["svg", "png"]
FORMATS: tuple[QrFormat, ...] = ("svg", "png")
CONTENT_TYPES: dict[QrFormat, str] = {"svg": "image/svg+xml", "png": "image/png"}
SCALE_MIN, SCALE_MAX, SCALE_DEFAULT = 1, 40, 8
BORDER = 4


def render(text: str, fmt: QrFormat, scale: int) -> bytes:
    """The QR code of ``text`` as an image file's bytes."""
    code = segno.make(text, error="m", micro=False)
    out = io.BytesIO()
    if fmt == "svg":
        code.save(out, kind="svg", scale=scale, border=BORDER, xmldecl=False, title=text)
    else:
        code.save(out, kind="png", scale=scale, border=BORDER)
    return out.getvalue()
