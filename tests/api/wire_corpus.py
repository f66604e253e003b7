"""The request streams of tests/api/test_wire_differential.py: a corpus of hostile and
odd HTTP/1.x input around a GET of the cached link ``CODE``, and a Hypothesis strategy
for more (pipelines of requests from parts, mutated and split across reads).

Most streams put a plain GET of the link after the odd request in the same write: it
is answered (on the wire, when aiohttp is idle) only if the odd request's framing
left it a request of its own, so a body or a second request riding inside the first
would show.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from hypothesis import strategies as st

from tests.api.raw_http import CODE


class Stream(NamedTuple):
    """One stream: ``chunks`` arrive in reads of their own (``wire_exchange.Sites``)."""

    name: str
    chunks: list[bytes]
    stall: bool = False  # the client reads nothing until its writes block
    receive_buffer: int | None = None  # the client's, set before it connects


def request(
    target: str = f"/{CODE}",
    *headers: str,
    method: str = "GET",
    version: str = "HTTP/1.1",
    body: bytes = b"",
) -> bytes:
    lines = [f"{method} {target} {version}", "Host: sluice", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


GET = request()
HEAD = request(method="HEAD")
# A GET of the link that would be answered, with this trace id, if it were taken for a
# request; it is sent as a body.
SMUGGLED_TRACE = "5a0991ed000000000000000000000001"
SMUGGLED = request(f"/{CODE}", f"traceparent: 00-{SMUGGLED_TRACE}-00f067aa0ba902b7-01")


def _bodies() -> Iterator[Stream]:
    """A GET of the cached link with a body, or something like one, each followed by a
    GET of the link in the same write: the bytes after the head are its body or they
    are not, as aiohttp's parser frames them, whoever answers."""
    inner = SMUGGLED  # a request inside a body: never answered, on either site
    framings: dict[str, tuple[list[str], bytes]] = {
        "cl-0": (["Content-Length: 0"], b""),
        "cl-5": (["Content-Length: 5"], b"hello"),
        "cl-request-inside": ([f"Content-Length: {len(inner)}"], inner),
        "cl-0-twice": (["Content-Length: 0", "Content-Length: 0"], b""),
        "cl-0-and-5": (["Content-Length: 0", "Content-Length: 5"], b"hello"),
        "cl-5-and-0": (["Content-Length: 5", "Content-Length: 0"], b"hello"),
        "cl-list": (["Content-Length: 5, 5"], b"hello"),
        "cl-negative": (["Content-Length: -1"], b""),
        "cl-plus": (["Content-Length: +5"], b"hello"),
        "cl-hex": (["Content-Length: 0x5"], b"hello"),
        "cl-letters": (["Content-Length: abc"], b""),
        "cl-spaces": (["Content-Length:  5 "], b"hello"),
        "cl-empty": (["Content-Length:"], b""),
        "cl-huge": (["Content-Length: 99999999999999999999999"], b""),
        "cl-space-before-colon": (["Content-Length : 5"], b"hello"),
        "te-chunked-empty": (["Transfer-Encoding: chunked"], b"0\r\n\r\n"),
        "te-chunked": (["Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n"),
        "te-request-inside": (
            ["Transfer-Encoding: chunked"],
            f"{len(inner):x}\r\n".encode() + inner + b"\r\n0\r\n\r\n",
        ),
        "te-extension-trailer": (
            ["Transfer-Encoding: chunked"],
            b"5;x=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
        ),
        "te-bad-size": (["Transfer-Encoding: chunked"], b"zz\r\nhello\r\n0\r\n\r\n"),
        "te-twice": (["Transfer-Encoding: chunked, chunked"], b"0\r\n\r\n"),
        "te-two-lines": (
            ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
            b"0\r\n\r\n",
        ),
        "te-gzip-chunked": (["Transfer-Encoding: gzip, chunked"], b"0\r\n\r\n"),
        "te-chunked-gzip": (["Transfer-Encoding: chunked, gzip"], b"0\r\n\r\n"),
        "te-identity": (["Transfer-Encoding: identity"], b""),
        "te-xchunked": (["Transfer-Encoding: xchunked"], b"0\r\n\r\n"),
        "te-tab": (["Transfer-Encoding:\tchunked"], b"0\r\n\r\n"),
        "te-space-before-colon": (["Transfer-Encoding : chunked"], b"0\r\n\r\n"),
        "te-folded": (["Transfer-Encoding:", " chunked"], b"0\r\n\r\n"),
        "cl-and-te": (["Content-Length: 5", "Transfer-Encoding: chunked"], b"0\r\n\r\n"),
        "te-and-cl": (["Transfer-Encoding: chunked", "Content-Length: 0"], b"0\r\n\r\n"),
        "cl-te-smuggle": (
            ["Content-Length: 5", "Transfer-Encoding: chunked"],
            b"0\r\n\r\n" + inner,
        ),
        "expect-no-body": (["Expect: 100-continue"], b""),
        "expect-cl-5": (["Expect: 100-continue", "Content-Length: 5"], b"hello"),
        "expect-unknown": (["Expect: 200-ok"], b""),
    }
    for name, (headers, body) in framings.items():
        yield Stream(name, [request(f"/{CODE}", *headers, body=body) + GET])
    # The body in a later write, after the head (and an answer to Expect) came back.
    head = request(f"/{CODE}", "Expect: 100-continue", "Content-Length: 5")
    yield Stream("expect-body-later", [head, b"hello" + GET])
    yield Stream("cl-body-later", [request(f"/{CODE}", "Content-Length: 5"), b"hello" + GET])
    # After a GET the wire answers, in the same read and in the next.
    smuggler = request(f"/{CODE}", f"Content-Length: {len(inner)}")
    yield Stream("wire-then-cl-request-inside", [GET + smuggler + inner + GET])
    yield Stream("wire-then-cl-request-inside-later", [GET + smuggler, inner + GET])


def _connections() -> Iterator[Stream]:
    """Versions and Connection headers, alone and followed by a GET of the link in the
    same write (which llhttp refuses, 400, after a head that closes the connection)."""
    heads = {
        "http-1.0": request(version="HTTP/1.0"),
        "http-1.0-keep-alive": request("/" + CODE, "Connection: keep-alive", version="HTTP/1.0"),
        "http-1.0-keep-alive-upper": request(
            f"/{CODE}", "Connection: Keep-Alive", version="HTTP/1.0"
        ),
        "close": request(f"/{CODE}", "Connection: close"),
        "close-upper": request(f"/{CODE}", "Connection: CLOSE"),
        "keep-alive": request(f"/{CODE}", "Connection: keep-alive"),
        "keep-alive-close": request(f"/{CODE}", "Connection: keep-alive, close"),
        "close-keep-alive": request(f"/{CODE}", "Connection: close, keep-alive"),
        "close-and-keep-alive-lines": request(
            f"/{CODE}", "Connection: close", "Connection: keep-alive"
        ),
        "connection-other": request(f"/{CODE}", "Connection: te"),
        "connection-empty": request(f"/{CODE}", "Connection:"),
        "upgrade-websocket": request(
            f"/{CODE}",
            "Connection: Upgrade",
            "Upgrade: websocket",
            "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        ),
        "upgrade-without-connection": request(f"/{CODE}", "Upgrade: websocket"),
        "connection-upgrade-alone": request(f"/{CODE}", "Connection: upgrade"),
        "http-1.2": request(version="HTTP/1.2"),
        "http-2.0": request(version="HTTP/2.0"),
        "http-0.9": request(version="HTTP/0.9"),
        "http-lower": request(version="http/1.1"),
        "http-1.10": request(version="HTTP/1.10"),
        "no-version": f"GET /{CODE}\r\nHost: sluice\r\n\r\n".encode(),
        "no-host": f"GET /{CODE} HTTP/1.1\r\n\r\n".encode(),
        "two-hosts": request(f"/{CODE}", "Host: other"),
    }
    heads["upgrade-h2c"] = request(
        f"/{CODE}", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: "
    )
    for name, head in heads.items():
        yield Stream(name, [head])
        yield Stream(f"{name}-then-get", [head + GET])


def _targets() -> Iterator[Stream]:
    """Request targets other than a plain ``/{code}``; each followed by a GET of the link."""
    targets = {
        "absolute": f"http://sluice/{CODE}",
        "absolute-other-host": f"https://elsewhere.example/{CODE}?q=1",
        "absolute-upper": f"HTTP://SLUICE/{CODE}",
        "asterisk": "*",
        "authority": "sluice:80",
        "query": f"/{CODE}?utm_source=x&y",
        "empty-query": f"/{CODE}?",
        "fragment": f"/{CODE}#top",
        "double-slash": f"//{CODE}",
        "trailing-slash": f"/{CODE}/",
        "dot": f"/./{CODE}",
        "dot-dot": f"/../{CODE}",
        "dot-dot-inside": f"/x/../{CODE}",
        "dot-dot-after": f"/{CODE}/..",
        "encoded-dot-dot": f"/%2e%2e/{CODE}",
        "encoded-letter": f"/{CODE[:-1]}%{ord(CODE[-1]):02x}",
        "encoded-slash": f"/{CODE}%2f",
        "nul": f"/{CODE}%00",
        "nul-alone": "/%00",
        "nul-in-query": f"/{CODE}?%00",
        "crlf": f"/{CODE}%0d%0aSet-Cookie:%20x=1",
        "crlf-in-query": f"/{CODE}?%0d%0aX:%20y",
        "overlong-slash": f"/%c0%af{CODE}",
        "overlong-dots": f"/%c0%ae%c0%ae/{CODE}",
        "bad-utf8": f"/{CODE}%ff",
        "semicolon": f"/{CODE};x=1",
        "backslash": f"/..\\{CODE}",
        "code-too-long": "/" + "a" * 65,
        "other-route": "/healthz",
        "other-route-prefix": "/admin",
    }
    for name, target in targets.items():
        yield Stream(name, [request(target) + GET])
    raw = {
        "raw-high-bytes": b"/" + CODE.encode() + b"\xc3\xa9",
        "raw-latin1": b"/caf\xe9",
        "raw-nul": b"/" + CODE.encode() + b"\x00",
        "raw-tab": b"/" + CODE.encode() + b"\tx",
    }
    for name, target in raw.items():
        yield Stream(name, [b"GET " + target + b" HTTP/1.1\r\nHost: sluice\r\n\r\n" + GET])
    lines = {
        "method-lower": b"get /" + CODE.encode() + b" HTTP/1.1\r\n",
        "method-unknown": b"FETCH /" + CODE.encode() + b" HTTP/1.1\r\n",
        "double-space": b"GET  /" + CODE.encode() + b" HTTP/1.1\r\n",
        "tab-separator": b"GET\t/" + CODE.encode() + b"\tHTTP/1.1\r\n",
        "trailing-space": b"GET /" + CODE.encode() + b" HTTP/1.1 \r\n",
        "bare-lf": b"GET /" + CODE.encode() + b" HTTP/1.1\n",
        "leading-crlf": b"\r\nGET /" + CODE.encode() + b" HTTP/1.1\r\n",
    }
    for name, line in lines.items():
        yield Stream(name, [line + b"Host: sluice\r\n\r\n" + GET])
    header_lines = {
        "header-bare-lf": "Accept: */*\n",
        "header-no-colon": "Accept\r\n",
        "header-space-name": "Bad Name: 1\r\n",
        "header-obs-fold": "User-Agent: a\r\n b\r\n",
        "header-nul-value": "User-Agent: a\x00b\r\n",
        "header-high-bytes": "User-Agent: caf\xe9\r\n",
        "header-empty-name": ": x\r\n",
    }
    for name, line in header_lines.items():
        head = f"GET /{CODE} HTTP/1.1\r\nHost: sluice\r\n{line}\r\n".encode("latin-1")
        yield Stream(name, [head + GET])


def _long_heads() -> Iterator[Stream]:
    """Heads near and over aiohttp's limits (8190 bytes a line or a field, 128 headers)."""
    for size in (8189, 8190, 8191, 8192):
        target = f"/{CODE}?" + "q" * (size - len(CODE) - 2)
        yield Stream(f"target-{size}", [request(target) + GET])
        yield Stream(f"value-{size}", [request(f"/{CODE}", "User-Agent: " + "u" * size) + GET])
        yield Stream(f"name-{size}", [request(f"/{CODE}", "X" * size + ": 1") + GET])
    for count in (126, 127, 128, 129):
        filler = [f"X-Filler-{i}: {i}" for i in range(count - 1)]  # and Host
        yield Stream(f"headers-{count}", [request(f"/{CODE}", *filler) + GET])
    big = [f"X-Big-{i}: " + "b" * 8000 for i in range(100)]
    yield Stream("head-800k", [request(f"/{CODE}", *big) + GET])


def _pipelines() -> Iterator[Stream]:
    post = request(f"/{CODE}", "Content-Length: 5", method="POST", body=b"hello")
    mixed = [GET, GET, HEAD, request("/healthz"), GET, request("/nosuchcode"), GET, post, GET]
    methods = [request(method=method) for method in ("PUT", "DELETE", "OPTIONS", "PATCH")]
    yield Stream("pipelined-mixed", [b"".join(mixed)])
    yield Stream(
        "pipelined-mixed-in-reads-of-2", [b"".join(mixed[i : i + 2]) for i in range(0, 9, 2)]
    )
    yield Stream("pipelined-methods", [b"".join([GET, *methods, GET])])
    yield Stream("pipelined-past-aiohttp-s-queue", [b"".join([GET] * 40 + [HEAD] + [GET] * 40)])
    yield Stream("pipelined-after-close", [GET + request(f"/{CODE}", "Connection: close") + GET])
    yield Stream("pipelined-after-1.0", [GET + request(version="HTTP/1.0") + GET])
    yield Stream("pipelined-then-garbage", [GET + GET + b"NOT HTTP\r\n\r\n" + GET])
    # The client reads nothing until its writes block: the server's writes back up first.
    many = [GET] * 600 + [request("/healthz"), HEAD] + [GET] * 600
    yield Stream("client-stops-reading", [b"".join(many)], stall=True, receive_buffer=4096)
    yield Stream(
        "client-stops-reading-in-reads-of-20",
        [b"".join(many[i : i + 20]) for i in range(0, len(many), 20)],
        stall=True,
        receive_buffer=4096,
    )


def _short_bodies() -> Iterator[Stream]:
    """Less body than the head announces: the server waits for the rest (the sentinel's
    bytes, then its body deadline), whoever would answer."""
    yield Stream("cl-100-short", [request(f"/{CODE}", "Content-Length: 100", body=b"hello")])
    yield Stream(
        "expect-cl-5-no-body", [request(f"/{CODE}", "Expect: 100-continue", "Content-Length: 5")]
    )
    yield Stream(
        "chunked-unterminated",
        [request(f"/{CODE}", "Transfer-Encoding: chunked", body=b"5\r\nhello\r\n")],
    )
    yield Stream("head-unterminated", [f"GET /{CODE} HTTP/1.1\r\nHost: sluice\r\nX-A: b".encode()])


def _splits() -> Iterator[Stream]:
    """A stream split in two at every byte: each head as it arrives in pieces."""
    stream = GET + HEAD + request(f"/{CODE}", "Content-Length: 2", body=b"hi") + GET
    for at in range(1, len(stream)):
        yield Stream(f"split-at-{at}", [stream[:at], stream[at:]])


def _corpus() -> Iterator[Stream]:
    for group in (_bodies, _connections, _targets, _long_heads, _pipelines, _short_bodies, _splits):
        yield from group()


CORPUS = list(_corpus())


# Parts of the requests Hypothesis puts together (``streams``): mostly well-formed, so
# that most streams reach the wire path, with odd parts among them.
_METHODS = ("GET", "GET", "GET", "GET", "HEAD", "POST", "OPTIONS")
_TARGETS = (
    f"/{CODE}",
    f"/{CODE}",
    f"/{CODE}",
    f"/{CODE}?utm_source=x",
    f"/{CODE}/",
    f"/{CODE}%00",
    f"/%2e%2e/{CODE}",
    f"http://sluice/{CODE}",
    "/nosuchcode",
    "/healthz",
    "*",
)
_VERSIONS = ("HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2")
_HEADERS = (
    "Connection: close",
    "Connection: keep-alive",
    "Connection: upgrade",
    "Upgrade: websocket",
    "Expect: 100-continue",
    "X-Request-ID: caller-trace-0001",
    "X-Request-ID: not a trace id",
    "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
    "Referer: https://news.example.com/item",
    "Host: other",
)
# A body framed as it says, or not: (framing headers, body) from the body's bytes.
_FRAMINGS = (
    lambda body: ((), b""),
    lambda body: ((), b""),
    lambda body: ((f"Content-Length: {len(body)}",), body),
    lambda body: (("Transfer-Encoding: chunked",), _chunked(body)),
    lambda body: (("Content-Length: 2",), body),
    lambda body: (("Content-Length: x",), body),
    lambda body: (("Content-Length: 0", "Transfer-Encoding: chunked"), _chunked(body)),
    lambda body: (("Transfer-Encoding: gzip",), body),
)
_BYTES = (b"\r", b"\n", b"\r\n", b" ", b"\t", b":", b",", b"\x00", b"\x80", b"0", b"a", b"/", b"%")


def _chunked(body: bytes) -> bytes:
    return (f"{len(body):x}\r\n".encode() + body + b"\r\n" if body else b"") + b"0\r\n\r\n"


@st.composite
def _plain(draw: st.DrawFn) -> bytes:
    """A GET of the link the wire path takes (when aiohttp is idle)."""
    harmless = _HEADERS[1], *_HEADERS[5:10]
    headers = draw(st.lists(st.sampled_from(harmless), max_size=2))
    return request(draw(st.sampled_from(_TARGETS[:4])), *headers)


@st.composite
def _odd(draw: st.DrawFn) -> bytes:
    """A request of odd parts (framing, target, version, headers), mutated or not."""
    framing, body = draw(st.sampled_from(_FRAMINGS)), draw(st.sampled_from((b"", b"hi", b"hello")))
    framed, body = framing(body)
    headers = [*draw(st.lists(st.sampled_from(_HEADERS), max_size=2)), *framed]
    odd = request(
        draw(st.sampled_from(_TARGETS)),
        *draw(st.permutations(headers)),
        method=draw(st.sampled_from(_METHODS)),
        version=draw(st.sampled_from(_VERSIONS)),
        body=body,
    )
    return draw(_mutated(odd))


@st.composite
def _mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data``, or (one time in three) with a byte or two inserted, taken out or replaced."""
    if draw(st.integers(0, 2)):
        return data
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.integers(0, len(data)))
        cut = draw(st.integers(0, 2))
        data = data[:at] + draw(st.sampled_from((b"", *_BYTES))) + data[at + cut :]
    return data


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """GETs of the link the wire path takes, pipelined around one odd request, and a last
    GET of the link; cut into up to four reads."""
    plain = draw(st.lists(_plain(), max_size=4))
    plain.insert(draw(st.integers(0, len(plain))), draw(_odd()))
    data = b"".join([*plain, GET])
    cuts = sorted(draw(st.sets(st.integers(1, len(data) - 1), max_size=3)))
    return [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]
