"""The import formats as their header rows tell them, and their rows as drafts."""

from __future__ import annotations

import pytest

from sluice.builtin.links.imports.formats import UnreadableFile, parse


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("url,alias,expires_at,tags,title", "sluice"),
        ("URL", "sluice"),
        ("keyword,url,title,timestamp,ip,clicks", "yourls"),
        ("createdAt,domain,shortCode,shortUrl,longUrl,title,tags,visits", "shlink"),
        ("Long URL,Short code,Title,Domain,Tags", "shlink"),  # Shlink's own CSV import
        ("shortUrl,longUrl", "shlink"),
        ("id,link,long_url,title,created_at,archived,tags", "bitly"),
        ("\ufeffLink,Long URL", "bitly"),  # a spreadsheet's byte order mark and spelling
    ],
)
def test_the_header_row_tells_the_format(header: str, name: str) -> None:
    assert parse(f"{header}\nhttps://example.org/,x\n".encode()).format.name == name


def test_a_foreign_short_url_gives_its_last_path_segment_as_the_code() -> None:
    data = (
        b"link,long_url\n"
        b"bit.ly/abcd1,https://example.org/1\n"
        b"https://go.example.com/path/abcd2/,https://example.org/2\n"
        b",https://example.org/3\n"
    )
    assert [d.code for d in parse(data).drafts] == ["abcd1", "abcd2", None]


def test_rows_are_numbered_from_the_first_after_the_header_blank_lines_counted() -> None:
    drafts = parse(b"url\nhttps://e.org/1\n\nhttps://e.org/2\n").drafts
    assert [(d.row, d.url) for d in drafts] == [(1, "https://e.org/1"), (3, "https://e.org/2")]


def test_unused_columns_are_reported_ignored() -> None:
    parsed = parse(b"url,tags,title,notes\nhttps://e.org/,a,T,n\n", stored=frozenset({"tags"}))
    assert parsed.ignored == ("title", "notes")
    assert parsed.drafts[0].tags == ("a",) and parsed.drafts[0].title is None


@pytest.mark.parametrize("data", [b"", b"\n\n", b"url\n", b"a,b\n1,2\n", b"url\n\xc3\x28\n"])
def test_unreadable_files_are_refused(data: bytes) -> None:
    with pytest.raises(UnreadableFile):
        parse(data)
