"""The runner of documented console sessions: what it runs and what it accepts as shown."""

from __future__ import annotations

from tests.console_blocks import matches, steps

PAGE = """\
Some text.

```console
$ export URL=http://127.0.0.1:8080
$ curl -s -XPOST $URL/v1/users \\
>     -d '{"email": "a@example.org"}'
{"id":"...","email":"a@example.org"}
$ curl -s $URL/healthz
{"status":"ok"}
```

```sh
curl -s $URL/not-run
```

!!! note
    ```console
    $ ls var/mail
    welcome_....eml
    ```
"""


def test_only_console_blocks_are_steps_with_their_continuations_and_output() -> None:
    found = steps(PAGE)
    assert [s.command for s in found] == [
        "export URL=http://127.0.0.1:8080",
        'curl -s -XPOST $URL/v1/users \\\n    -d \'{"email": "a@example.org"}\'',
        "curl -s $URL/healthz",
        "ls var/mail",
    ]
    assert [s.expected for s in found] == [
        "",
        '{"id":"...","email":"a@example.org"}',
        '{"status":"ok"}',
        "welcome_....eml",
    ]
    assert [s.line for s in found] == [4, 5, 8, 18]


def test_only_commands_that_change_nothing_are_read_only() -> None:
    assert [s.read_only for s in steps(PAGE)] == [False, False, True, True]


def test_dots_stand_for_anything_and_the_rest_must_be_as_shown() -> None:
    shown = '{"id":"...","views":1,"as_of":"..."}'
    assert matches(shown, '{"id":"01a2","views":1,"as_of":"2026-12-06T03:28:12Z"}')
    assert not matches(shown, '{"id":"01a2","views":2,"as_of":"2026-12-06T03:28:12Z"}')
    assert not matches("ok", "ok, and more")
    assert matches("header\n...\nlast line", "header\nline 1\r\nline 2 \nlast line\n")
