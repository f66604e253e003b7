"""User-Agent patterns tried only where they can match: the cost of an unseen agent.

ua-parser's resolver tries its ~430 browser patterns (and ~200 OS patterns) in order
until one matches, and the crawler list is ~1,500 patterns: an agent matching none of
them, such as 500 random characters, ran every one over its first 512 characters
(about 4 ms per redirect, where a cached agent costs a dictionary lookup). Almost every
pattern needs some literal text to match: ``(espn\\.go)`` needs ``espn.go``,
``Googlebot`` needs itself, an alternation one of its alternatives' texts, and
``[Ss][Pp]ider`` needs ``spider`` in the agent lowercased. ``Screened`` works that text
out once per pattern, from the regex's parse by the standard library's own parser
(``re._parser``), and tries a pattern only when the agent contains it (a substring
test), so the answer is the resolver's own (the first pattern, in its order, that
matches) at a fraction of the cost. One browser pattern of 433 needs no such text and
is always tried. Classification reads the first ``PREFIX`` characters of the header.

``re._parser`` is CPython's, private, and has moved before (``sre_parse`` until 3.11):
where it is missing, or a pattern's parse is not what this module knows, the pattern
needs nothing and is always tried, the libraries' own cost and the same answers
(tests/unit/test_agent_cost.py runs the agents once more that way).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, Generic, NamedTuple, TypeVar

import crawleruseragents
import ua_parser
from ua_parser import OS, UserAgent

try:  # the regex's parse tree, by the standard library's own parser
    from re import _constants as sre  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # another interpreter: every pattern is tried
    sre = sre_parse = None

T = TypeVar("T")


class Needs(NamedTuple):
    """Strings one of which is in every text a pattern matches; ``folded``: in the text
    lowercased (the pattern spells a letter either way, as ``[Ss][Pp]ider``)."""

    strings: tuple[str, ...]
    folded: bool


def needs(regex: str, flags: int = 0) -> Needs | None:
    """What every match of ``regex`` contains; None when there is nothing worth testing
    (a case-insensitive pattern, or one that needs no text of two characters or more)."""
    if sre_parse is None or flags & re.IGNORECASE:
        return None
    try:
        tree = sre_parse.parse(regex, flags)
        if tree.state.flags & re.IGNORECASE:  # an inline (?i) at the start
            return None
        return _best(_candidates(tree.data))
    except Exception:  # a parse tree of another shape: tried always, as the libraries do
        return None


def _best(candidates: Iterable[Needs]) -> Needs | None:
    """The candidate whose shortest string is longest (the rarest text), exact before
    folded and fewest strings on ties; None when even that is a single character (which
    most agents contain anyway)."""
    ranked = sorted(candidates, key=lambda c: (-min(map(len, c.strings)), c.folded, len(c.strings)))
    if not ranked or min(map(len, ranked[0].strings)) < 2:
        return None
    return ranked[0]


def _either_case(op: Any, av: Any) -> str | None:
    """The letter a class of exactly its two cases (``[Ss]``) stands for, lowercased."""
    if op is not sre.IN or len(av) != 2 or any(o is not sre.LITERAL for o, _ in av):
        return None
    first, second = chr(av[0][1]), chr(av[1][1])
    if first != second and first.lower() == second.lower() and first.isascii():
        return first.lower()
    return None


def _candidates(items: Any) -> list[Needs]:
    """Every requirement of a sequence of parsed items: each run of literal characters
    (through plain groups), and each alternation or repetition every match goes through."""
    found: list[Needs] = []
    run: list[str] = []
    folded = False

    def end_run() -> None:
        nonlocal folded
        if run:
            text = "".join(run)
            found.append(Needs((text.lower() if folded else text,), folded))
            run.clear()
        folded = False

    for op, av in _flat(items):
        if op is sre.LITERAL:
            run.append(chr(av))
            continue
        letter = _either_case(op, av)
        if letter is not None:
            run.append(letter)
            folded = True
            continue
        end_run()
        if op is sre.BRANCH:
            alternatives = [_best(_candidates(branch.data)) for branch in av[1]]
            if all(alternatives):
                found.append(_union([alt for alt in alternatives if alt]))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[0] >= 1:
            inner = _best(_candidates(av[2].data))
            if inner:
                found.append(inner)
    end_run()
    return found


def _union(alternatives: list[Needs]) -> Needs:
    """One of the alternatives' strings; all lowercased if any of them is (sound: a text
    that contains a string contains it lowercased once lowercased itself)."""
    folded = any(alt.folded for alt in alternatives)
    strings = (s.lower() if folded else s for alt in alternatives for s in alt.strings)
    return Needs(tuple(dict.fromkeys(strings)), folded)


def _flat(items: Any) -> Iterable[tuple[Any, Any]]:
    """The items, with groups that change no flags opened in place (a group is its
    content, in sequence); a group with flags of its own stays closed (it needs nothing)."""
    for op, av in items:
        if op is sre.SUBPATTERN and not av[1] and not av[2]:
            yield from _flat(av[3].data)
        else:
            yield op, av


class Screened(Generic[T]):
    """Matchers (callables returning a result or None), tried in their order, each only
    when the text contains what its pattern needs: the first result, as trying them all
    in order would give."""

    def __init__(self, matchers: Iterable[tuple[str, int, Callable[[str], T | None]]]) -> None:
        # (strings, folded, matcher); one string (most patterns) is tested on its own.
        self._matchers: list[tuple[str | tuple[str, ...] | None, bool, Callable[[str], T | None]]]
        self._matchers = []
        for regex, flags, match in matchers:
            required = needs(regex, flags)
            if required is None:
                self._matchers.append((None, False, match))
            else:
                strings = required.strings
                self._matchers.append(
                    (strings[0] if len(strings) == 1 else strings, required.folded, match)
                )

    def first(self, text: str) -> T | None:
        lowered = text.lower()
        for required, folded, match in self._matchers:
            if required is not None:
                seen = lowered if folded else text
                if type(required) is str:
                    if required not in seen:
                        continue
                elif not any(s in seen for s in required):
                    continue
            result = match(text)
            if result is not None:
                return result
        return None


# The start of a User-Agent that classification reads. Every uap-core pattern and every
# crawler pattern that matches a real agent does so within it (tests/unit/test_agent_cost.py
# holds it over the crawler list's ~2,000 real agents); a longer header costs no more.
PREFIX = 256


@functools.cache
def browsers() -> Screened[UserAgent]:
    """ua-parser's browser patterns (uap-core), in their order."""
    return Screened((m.regex, _flags(m), m) for m in ua_parser.load_builtins()[0])


@functools.cache
def systems() -> Screened[OS]:
    """ua-parser's OS patterns (uap-core), in their order."""
    return Screened((m.regex, _flags(m), m) for m in ua_parser.load_builtins()[1])


def _flags(matcher: object) -> int:
    # ``flags`` is documented for device patterns; browser and OS patterns have none.
    return int(getattr(matcher, "flags", 0))


@functools.cache
def crawlers() -> Screened[re.Match[str]]:
    """The crawler-user-agents patterns (bots and link previewers), case-sensitive as
    ``crawleruseragents.is_crawler`` matches them by default (since 1.x; releases before
    that searched without case)."""
    patterns = (item["pattern"] for item in crawleruseragents.CRAWLER_USER_AGENTS_DATA)
    return Screened((p, 0, re.compile(p).search) for p in patterns)
