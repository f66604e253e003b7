"""The wire path against hostile input, by difference: every request stream of the
corpus (tests/api/wire_corpus.py: bodies and framings, versions and Connection
headers, odd targets, long heads, pipelines, a client that stops reading, every split
of a stream in two; 336 streams) and of a Hypothesis strategy (GETs of the link
around one odd request, mutated, cut into reads) is sent once to a site that answers
redirects on the wire (``sluice.http.redirect_wire``) and once to a site of the same
app, link cache and visit recorder that does not (aiohttp, then the request-level fast
path or the app). Both must write back the same bytes and record the same visits.

Compared: everything the server writes until it closes the connection (status lines,
headers in their order, bodies); whether the connection was still open after the
stream (the sentinel, a last request, is answered only then); whether it was closed or
left open; the visits recorded. Not compared, as they differ from one answer to the
next: ``Date`` values (a clock, formatted once a second) and the ``X-Trace-Id`` values
the server made up (random; a trace id the caller sent is compared); and a reset
counts as a close (``wire_exchange.Answer.end``). Nothing else in these answers varies.

Differences found: none, over the corpus and 5,000 generated streams (120 a run here).
The wire path takes a head only after aiohttp's own parser framed it, so a body, or a
request inside one, is never a request on one site and not on the other
(``test_a_request_sent_as_a_body_is_never_answered``); it takes only a GET over
HTTP/1.1 with an empty payload, kept alive, not an upgrade, in origin form, while
aiohttp waits for a head with none queued; everything else, parser errors included,
goes to aiohttp as it would have. Two differences showed on the way and were the
harness's, not the wire's: a chunk sent before the server had read the one before
sometimes arrived in the same read, on one site only, and aiohttp's answer depends on
the reads (below), so the client now waits for the server to have read every byte
(``wire_exchange.count_reads``); and whether a server's close finds client bytes still
unread (a reset instead of a FIN) is a race on either site.

What aiohttp 3.14 does with this input, alike with and without the wire (noted, as it
surprises; not sluice's to change here): llhttp refuses bytes that follow a head that
closes the connection (``Connection: close``, HTTP/1.0 without keep-alive) in the same
read, and aiohttp answers the whole read with one 400, the valid request before them
unanswered; any parse error drops the requests parsed before it in that read the same
way, and the 400's text quotes the read. A head needs ``Host`` in HTTP/1.1 and refuses
two; ``Transfer-Encoding`` other than a final ``chunked``, a list of Content-Lengths,
or both headers at once are refused; a target or a header name or value over 8190
bytes, or more than 128 headers, is a 400, while 100 headers of 8 kB (800 kB) are
taken. An absolute-form target is answered as its path (the host ignored); ``GET *``
and an authority-form target are a 400.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from sluice.app.testing import wait_for
from sluice.builtin.links.http.keys import VISITS
from sluice.config import Config
from sluice.http.app_keys import CONFIG
from sluice.http.connections import GuardedSite
from sluice.http.redirect_wire import WireRedirects
from sluice.store import Store
from tests.api.helpers import Client
from tests.api.raw_http import cached, visits_stored
from tests.api.wire_corpus import CORPUS, SMUGGLED_TRACE, streams
from tests.api.wire_exchange import Answer, Sites, count_reads, difference


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    """A short body deadline: a stream that announces more body than it sends is closed
    (408) in half a second, not the default 30 (both sites alike)."""
    return make_config(body_timeout_seconds=0.5)


@pytest.fixture
async def sites(client: Client, store: Store, monkeypatch: pytest.MonkeyPatch) -> Sites:
    """The test client's site (the wire on, as ``sluice api`` serves) and a second site
    of the same runner without it, with the link ``CODE`` cached."""
    await cached(client, store)
    assert client.app is not None
    off = GuardedSite(client.server.runner, client.app[CONFIG], wire=None)
    await off.start()  # stopped with the runner, after the test
    return Sites(
        client.port,
        off.port,
        server=client.server.runner.server,
        recorder=client.app[VISITS],
        reads=count_reads(monkeypatch),
        loop=asyncio.get_running_loop(),
    )


@pytest.fixture
def on_the_wire(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many redirects the wire answered: the comparison is of the wire, not of aiohttp
    with itself."""
    answered = [0]
    answer = WireRedirects.response

    def counted(self: WireRedirects, message: Any, remote: str | None) -> bytes | None:
        response = answer(self, message, remote)
        answered[0] += response is not None
        return response

    monkeypatch.setattr(WireRedirects, "response", counted)
    return answered


def test_the_corpus_names_are_unique() -> None:
    assert len({stream.name for stream in CORPUS}) == len(CORPUS)


async def test_the_wire_answers_the_corpus_as_aiohttp_does(
    sites: Sites, store: Store, on_the_wire: list[int]
) -> None:
    def run() -> list[str]:
        found = []
        for stream in CORPUS:
            on, off = sites.both(
                stream.chunks, stall=stream.stall, receive_buffer=stream.receive_buffer
            )
            if on != off:
                found.append(f"{stream.name}:\n  {difference(on, off)}")
        return found

    differences = await asyncio.to_thread(run)
    assert not differences, "\n".join(differences)
    assert on_the_wire[0] >= 200  # about 300 of its 1,500 GETs of the link; the rest came
    # behind a request aiohttp had in hand, in a read with a body, or past its queue
    await wait_for(visits_stored(store, sites.recorded), timeout=20)


# The corpus's requests sent as a body, and what each stream must get, on either site:
# the statuses in order (the sentinel's 200 last, when the connection stayed open) and
# the visits recorded.
SMUGGLING = {
    "cl-request-inside": ([b"302", b"302", b"200"], 2),
    "te-request-inside": ([b"302", b"302", b"200"], 2),
    "cl-te-smuggle": ([b"400"], 0),
    "wire-then-cl-request-inside": ([b"302", b"302", b"302", b"200"], 3),
    "wire-then-cl-request-inside-later": ([b"302", b"302", b"302", b"200"], 3),
}


async def test_a_request_sent_as_a_body_is_never_answered(
    sites: Sites, on_the_wire: list[int]
) -> None:
    """No desync: a GET of the link inside a body (by Content-Length, chunked, or both
    at once, which is refused) is never answered as a request of its own, whether the
    wire answered the request before it or not."""
    streams = [stream for stream in CORPUS if stream.name in SMUGGLING]

    def run() -> list[tuple[str, Answer, Answer]]:
        return [(stream.name, *sites.both(stream.chunks)) for stream in streams]

    for name, *answers in await asyncio.to_thread(run):
        for answer in answers:
            statuses = re.findall(rb"^HTTP/1\.[01] (\d{3}) ", answer.data, re.MULTILINE)
            assert (statuses, answer.visits) == SMUGGLING[name], name
            assert SMUGGLED_TRACE.encode() not in answer.data, name
    assert len(streams) == len(SMUGGLING)
    assert on_the_wire[0] >= 2  # the first GET of the two wire-then streams


async def test_mutated_and_split_streams_are_answered_alike(
    sites: Sites, store: Store, on_the_wire: list[int]
) -> None:
    """Hypothesis: pipelines of requests made of odd parts, bytes inserted, deleted or
    replaced, cut into reads at random places."""

    @settings(
        max_examples=120,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(chunks=streams())
    def alike(chunks: list[bytes]) -> None:
        on, off = sites.both(chunks)
        assert on == off, f"{chunks!r}\n  {difference(on, off)}"

    await asyncio.to_thread(alike)
    assert on_the_wire[0] > 0
    await wait_for(visits_stored(store, sites.recorded), timeout=20)
