"""Which service a CSV of links comes from, told by its header row, and each row as a draft.

Header names are compared without case, spaces, ``_`` or ``-`` (``long_url``, ``Long
URL`` and ``longUrl`` are one name). The formats, checked in this order:

- ``yourls``: ``keyword`` and ``url`` (the columns of YOURLS' ``yourls_url`` table that
  its export plugins write: ``keyword, url, title, timestamp, ip, clicks``);
- ``shlink``: ``longUrl`` with ``shortCode`` or ``shortUrl`` (the web client's export:
  ``createdAt, domain, shortCode, shortUrl, longUrl, title, tags, visits``, tags
  separated by ``|``; Shlink's own CSV import names them ``Long URL``, ``Short code``);
- ``bitly``: ``long_url`` with ``link`` (Bitly's links export: ``id, link, long_url,
  title, created_at, archived, tags, ...``); the code is the back-half of ``link``;
- ``sluice``: ``url``, with ``alias``, ``expires_at``, ``tags``, ``title`` optional.

Codes from another service are kept as aliases when they pass sluice's alias rules and
are free; otherwise the link gets a new code and its row says why. A ``sluice`` row's
alias is the user's own request: one that breaks the rules makes the row invalid.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit


class UnreadableFile(Exception):
    """Not a CSV this importer can read: the reason is said to the user (422)."""


@dataclass(frozen=True)
class Format:
    name: str
    url: str  # the normalised names of the columns each field comes from
    code: str | None = None
    expires_at: str | None = None
    tags: str | None = None
    title: str | None = None
    foreign: bool = True  # codes of another service: kept when they can be, else replaced
    code_is_url: bool = False  # the column holds a whole short URL (Bitly's ``link``)


SLUICE = Format("sluice", "url", "alias", "expiresat", "tags", "title", foreign=False)
YOURLS = Format("yourls", "url", "keyword", title="title")
SHLINK = Format("shlink", "longurl", "shortcode", tags="tags", title="title")
SHLINK_BY_URL = Format(
    "shlink", "longurl", "shorturl", tags="tags", title="title", code_is_url=True
)
BITLY = Format("bitly", "longurl", "link", tags="tags", title="title", code_is_url=True)

_NOT_NAME = re.compile(r"[^a-z0-9]")
_TAG_SEPARATORS = re.compile(r"[|,;]")


@dataclass(frozen=True)
class Draft:
    """One data row as the format reads it, before any rule is checked."""

    row: int  # 1 for the first row after the header
    url: str
    code: str | None
    expires_at: str | None
    tags: tuple[str, ...]
    title: str | None


@dataclass(frozen=True)
class Parsed:
    format: Format
    ignored: tuple[str, ...]  # header names whose values are not used
    drafts: list[Draft]


def normalise(name: str) -> str:
    return _NOT_NAME.sub("", name.strip().lstrip("\ufeff").lower())


def detect(header: list[str]) -> Format:
    names = {normalise(name) for name in header}
    if {"keyword", "url"} <= names:
        return YOURLS
    if "longurl" in names and "shortcode" in names:
        return SHLINK
    if "longurl" in names and "shorturl" in names:
        return SHLINK_BY_URL
    if {"longurl", "link"} <= names:
        return BITLY
    if "url" in names:
        return SLUICE
    raise UnreadableFile(
        "the header row names no known format: sluice (url, alias, expires_at, tags, title),"
        " Bitly (link, long_url, ...), YOURLS (keyword, url, ...) or Shlink (shortCode,"
        " longUrl, ...)"
    )


def decode(data: bytes) -> str:
    """The file as text: UTF-8, a leading byte order mark dropped (spreadsheets write one)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"the file is not UTF-8 (byte {exc.start})") from None


def _fields(fmt: Format, *, stored: frozenset[str]) -> dict[str, str]:
    """The fields this import reads, by column name: tags and title only when links can
    store them (``stored``)."""
    wanted = {"url": fmt.url, "code": fmt.code, "expires_at": fmt.expires_at}
    wanted |= {field: getattr(fmt, field) for field in ("tags", "title") if field in stored}
    return {field: column for field, column in wanted.items() if column is not None}


def _code(fmt: Format, value: str) -> str | None:
    value = value.strip()
    if fmt.code_is_url and value:
        # bit.ly/abc, https://s.example/abc, with or without a scheme: the last path segment.
        parts = urlsplit(value if "//" in value else f"//{value}")
        value = parts.path.rstrip("/").rpartition("/")[2]
    return value or None


def parse(data: bytes, *, stored: frozenset[str] = frozenset()) -> Parsed:
    """Every data row of the file as a draft; ``UnreadableFile`` when the file is not
    UTF-8 CSV with a known header row and at least one data row."""
    reader = csv.reader(io.StringIO(decode(data), newline=""))
    try:
        header = next(reader, None)
        if header is None or not any(name.strip() for name in header):
            raise UnreadableFile("the file is empty: a header row and rows are needed")
        fmt = detect(header)
        index = {normalise(name): i for i, name in reversed(list(enumerate(header)))}
        fields = _fields(fmt, stored=stored)
        used = {index[column] for column in fields.values() if column in index}
        drafts = [_draft(fmt, fields, index, number, cells) for number, cells in _rows(reader)]
    except csv.Error as exc:
        raise UnreadableFile(f"the file is not valid CSV: {exc}") from None
    if not drafts:
        raise UnreadableFile("the file has a header row but no rows")
    ignored = tuple(name for i, name in enumerate(header) if i not in used and name.strip())
    return Parsed(fmt, ignored, drafts)


def _rows(reader: Iterator[list[str]]) -> list[tuple[int, list[str]]]:
    """Data rows with their numbers; blank lines are skipped and numbered too."""
    return [(n, cells) for n, cells in enumerate(reader, start=1) if any(c.strip() for c in cells)]


def _draft(
    fmt: Format, fields: dict[str, str], index: dict[str, int], number: int, cells: list[str]
) -> Draft:
    def cell(field: str) -> str | None:
        column = fields.get(field)
        at = None if column is None else index.get(column)
        if at is None or at >= len(cells):
            return None
        return cells[at].strip() or None

    tags = tuple(t.strip() for t in _TAG_SEPARATORS.split(cell("tags") or "") if t.strip())
    raw_code = cell("code")
    return Draft(
        row=number,
        url=cell("url") or "",
        code=None if raw_code is None else _code(fmt, raw_code),
        expires_at=cell("expires_at"),
        tags=tags,
        title=cell("title"),
    )
