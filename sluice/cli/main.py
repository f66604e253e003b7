"""The ``sluice`` command: argument parsing -> load_config -> configure_logging -> command."""

from __future__ import annotations

import argparse
import asyncio
import sys
import textwrap
from collections.abc import Callable, Sequence
from importlib import metadata

import structlog

from sluice.config import load_config
from sluice.errors import SluiceError
from sluice.history import search as event_search
from sluice.process.stop_signals import catch_early
from sluice.security.secret_files import make_private
from sluice.telemetry.logs import configure_logging
from sluice.telemetry.metrics_dir import prepare

# Where ``--help`` sends a reader: the generated command reference (one section per
# command) and the guide of the command, by repository path (there is no hosted site).
CLI_DOCS = "docs/reference/cli.md"
CHANGE_APPS_HELP = (
    "make the apps this process loads (SLUICE_APPS) the deployment's, migrating their"
    " tables, instead of refusing a set other than the one recorded"
    " (guide: docs/guides/write-an-app.md)"
)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and the epilog's line breaks (the docs pointers stay one
    per line, never broken at a hyphen); ``_command`` wraps the prose itself."""


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    *,
    guide: str | None = None,
    detail: str = "",
) -> argparse.ArgumentParser:
    """A (sub)command whose ``--help`` says what it does in one line (``summary``, also
    its line in the parent's list), then ``detail``, then where its docs are."""
    paragraphs = [summary[0].upper() + summary[1:] + "."]
    if detail:
        paragraphs.append(textwrap.fill(detail, 79, break_on_hyphens=False))
    command = sub.add_parser(
        name, help=summary, description="\n\n".join(paragraphs), formatter_class=_Help
    )
    path = command.prog.split(maxsplit=1)[1]  # "tasks run" of "sluice tasks run"
    pointers = [f"docs:  {CLI_DOCS}#sluice-{path.replace(' ', '-')}"]
    if guide is not None:
        pointers.append(f"guide: docs/{guide}")
    command.epilog = "\n".join(pointers)
    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice",
        description=textwrap.fill(
            "sluice: an event-sourced backend service on Redis Streams (API, relay, handler"
            " groups, scheduler), configured by SLUICE_* variables.",
            79,
        ),
        epilog=f"docs:  {CLI_DOCS} (every command), docs/reference/configuration.md"
        "\n       `sluice COMMAND --help` says what one command does",
        formatter_class=_Help,
    )
    parser.add_argument("--version", action="version", version=f"sluice {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = _command(
        sub,
        "up",
        "run the whole service in one process (embedded Redis if none is set)",
        guide="tutorial.md",
        detail="The API, the relay, every handler group and the scheduler, in one process;"
        " with neither SLUICE_REDIS_URL nor SLUICE_REDIS_CLUSTER_NODES set, an embedded"
        " redis-server under the data dir. First checks that SLUICE_PORT on SLUICE_HOST"
        " is free: a port anything listens on (another sluice included) ends it at once,"
        " before the admin token is made or anything started. Then prints the admin token"
        " the first time, the URL of the API, and those of its docs and of the operations"
        " page (when the operations app is loaded). A process whose apps (SLUICE_APPS) are"
        " not the deployment's is refused at start, naming the difference.",
    )
    up.add_argument("--change-apps", action="store_true", help=CHANGE_APPS_HELP)
    api = _command(sub, "api", "serve the HTTP API", guide="guides/several-hosts.md")
    api.add_argument(
        "--processes",
        type=_positive,
        metavar="N",
        help="serve the port from N processes (default: SLUICE_API_PROCESSES, 1)",
    )
    # A child of ``--processes``: binds its port beside its siblings (SO_REUSEPORT).
    api.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    _command(sub, "relay", "publish committed events to Redis Streams", guide="concepts/relay.md")
    worker = _command(sub, "worker", "run handler groups", guide="concepts/streams-groups.md")
    worker.add_argument(
        "groups", nargs="+", metavar="GROUP", help="handler groups (`sluice groups list`)"
    )
    worker.add_argument("--consumer", help="consumer name (default: the host name)")
    _command(
        sub,
        "scheduler",
        "run cron tasks (once per occurrence) and reminders",
        guide="concepts/scheduler.md",
    )
    tasks = _command(
        sub, "tasks", "scheduled tasks: list them, run one now", guide="concepts/scheduler.md"
    )
    tasks_sub = tasks.add_subparsers(dest="action", required=True)
    _command(tasks_sub, "list", "every task: its schedule, policies and last run")
    tasks_run = _command(tasks_sub, "run", "run a task now, under its lock, and wait")
    tasks_run.add_argument("name", help="the task (`sluice tasks list` names them)")
    migrate = _command(
        sub,
        "migrate",
        "apply database migrations and exit",
        guide="guides/upgrades.md",
        detail="Applies the steps the database lacks, sluice's and each loaded app's"
        ' (SLUICE_APPS), and says what it did: "database created: N migration steps'
        ' applied (sluice:1-N, links:1-M, ...)" on a new database, "database migrated:'
        ' ..." with the steps of an upgrade or a new app, or "database is up to date:'
        ' nothing to apply". The first migration records the apps it loads as the'
        " deployment's; every later process must load the same (SLUICE_APPS), and"
        " --change-apps is how they change.",
    )
    migrate.add_argument("--change-apps", action="store_true", help=CHANGE_APPS_HELP)
    copy = _command(
        sub,
        "copy-store",
        "copy the whole store into an empty database (stop the deployment first)",
        guide="guides/move-from-sqlite.md",
        detail="Copies the whole store (event history, state, positions) of"
        " SLUICE_DATABASE_URL into an empty database, then checks the counts. Stop the"
        " deployment first: a store still written to is copied as it was when the copy"
        " began, and later writes stay behind. A target that is not empty is refused and"
        " left untouched.",
    )
    copy.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the empty target: postgresql://user:password@host:port/db or sqlite:///PATH",
    )
    copy.add_argument(
        "--batch", type=_positive, default=10_000, help="rows per read and write, at most"
    )
    copy.add_argument("--no-progress", action="store_true", help="no progress bar")
    replay = _command(
        sub,
        "replay",
        "rebuild a projection from the event history",
        guide="concepts/projections-replay.md",
    )
    replay.add_argument("projection", help="article-views or link-stats")
    replay.add_argument("--no-progress", action="store_true", help="no progress bar")
    status = _command(
        sub, "status", "streams, groups, lag, pending, dead letters", guide="guides/operate.md"
    )
    status.add_argument("--json", action="store_true", help="the report as JSON")
    _flow_command(sub)
    _dead_letter_commands(sub)
    _group_commands(sub)
    _events_command(sub)
    _aggregate_commands(sub)
    return parser


def _dead_letter_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = _command(sub, "dlq", "dead letters: list, redrive, drop", guide="guides/operate.md")
    dlq_sub = dlq.add_subparsers(dest="action", required=True)
    dlq_list = _command(dlq_sub, "list", "the dead letters, newest first")
    dlq_list.add_argument("--group", help="only this group's (default: every group's)")
    dlq_list.add_argument("--limit", type=int, default=50, help="at most this many")
    one_help = "GROUP may be left out when only one group holds ID"
    dlq_redrive = _command(
        dlq_sub,
        "redrive",
        "send dead letters back to their group: one, or every match",
        detail=f"One dead letter ([GROUP] ID; {one_help}), or every one --group and/or"
        " --type match.",
    )
    dlq_redrive.add_argument(
        "target", nargs="*", metavar="[GROUP] ID", help="the dead letter's id, after its group"
    )
    dlq_redrive.add_argument("--group", help="without ID: every dead letter of this group")
    dlq_redrive.add_argument("--type", help="without ID: every dead letter of this event type")
    dlq_drop = _command(dlq_sub, "drop", "delete one dead letter for good", detail=f"{one_help}.")
    dlq_drop.add_argument(
        "target", nargs="+", metavar="[GROUP] ID", help="the dead letter's id, after its group"
    )


def _flow_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    flow = _command(
        sub,
        "flow",
        "a flow group's keys waiting, its busiest keys, and one key's waiting entries",
        guide="guides/operate.md",
    )
    flow.add_argument("group", metavar="GROUP", help="a group declared with flow=")
    flow.add_argument("--key", help="list this key's waiting entries, oldest first")
    flow.add_argument(
        "--limit", type=_positive, default=20, help="keys shown, or entries of --key shown"
    )
    flow.add_argument("--after", metavar="CURSOR", help="with --key: the page after this one")
    flow.add_argument("--json", action="store_true", help="the report as JSON")


def _group_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    groups = _command(
        sub, "groups", "handler groups: list them, pause one, resume one", guide="guides/operate.md"
    )
    groups_sub = groups.add_subparsers(dest="action", required=True)
    _command(groups_sub, "list", "every group, running or paused (since when)")
    groups_pause = _command(
        groups_sub,
        "pause",
        "stop the group's consumers on every host (within 2 s; kept until resumed)",
    )
    groups_pause.add_argument("name", metavar="GROUP", help="the group to pause")
    groups_resume = _command(groups_sub, "resume", "let a paused group take entries again")
    groups_resume.add_argument("name", metavar="GROUP", help="the group to resume")


def _aggregate_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    aggregates = _command(
        sub, "aggregates", "event-sourced aggregates: adopt an existing history", guide=_AGGREGATES
    )
    aggregates_sub = aggregates.add_subparsers(dest="action", required=True)
    adopt = _command(
        aggregates_sub,
        "adopt",
        "give versions to the events an aggregate type had before its Aggregate class",
        guide=_AGGREGATES,
        detail="Every id of TYPE that has no version yet gets the versions 1..n of its events"
        " in the events table, in seq order, so that its Aggregate class loads them. Safe"
        " to run again: a second run adopts nothing and says so. Ids that already have"
        " versions are left alone; events of theirs without a version are reported, not"
        " changed. Refused, with nothing written, when the archive holds events of TYPE.",
    )
    adopt.add_argument("aggregate", metavar="TYPE", help="the aggregate type (orders, ...)")


_AGGREGATES = "concepts/aggregates.md#adopting-an-existing-history"


def _events_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    events = _command(
        sub,
        "events",
        "search the event history, newest first (type, aggregate, trace id, time)",
        guide="guides/operate.md",
        detail="The events of the hot history, newest first, as GET /v1/admin/events"
        " finds them; archived events are not searched. Times are RFC 3339 with an offset.",
    )
    # Checked by the command, once the apps (SLUICE_APPS) have added theirs.
    events.add_argument("--type", help="events of this type (UserRegistered, LinkVisited, ...)")
    events.add_argument(
        "--aggregate",
        help="events of this aggregate type (users, links, ...); TYPE:ID: the events one"
        " event-sourced aggregate saved, in version order",
    )
    events.add_argument(
        "--trace-id",
        type=_searched(event_search.trace_id),
        help="events of this trace (32 hex digits)",
    )
    events.add_argument("--since", type=_searched(event_search.instant), help="inclusive")
    events.add_argument("--until", type=_searched(event_search.instant), help="exclusive")
    events.add_argument(
        "--limit",
        type=_searched(event_search.page_limit),
        default=event_search.LIMIT_DEFAULT,
        help=f"events per page, 1 to {event_search.LIMIT_MAX}",
    )
    events.add_argument(
        "--cursor",
        type=_searched(event_search.decode_cursor),
        help="the next page, as the previous one printed it",
    )
    events.add_argument("--json", action="store_true", help="the page as the API returns it")


def _searched(check: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse type from an event-search check: its reason becomes the usage error."""

    def convert(text: str) -> object:
        try:
            return check(text)
        except event_search.Invalid as exc:
            raise argparse.ArgumentTypeError(f"{text!r} {exc}") from None

    return convert


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


# The commands that run until they are stopped (sluice.process.stop_signals).
SERVICES = frozenset({"up", "api", "relay", "worker", "scheduler"})


def _version() -> str:
    """The installed distribution's version: what pip installed is what is reported."""
    try:
        return metadata.version("sluice")
    except metadata.PackageNotFoundError:  # run from a source tree never installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in SERVICES:
        catch_early()
    try:
        config = load_config()
        configure_logging(config)
        if make_private(config.data_dir):
            structlog.get_logger(__name__).warning(
                "data dir was open to other users; narrowed to 0700", path=str(config.data_dir)
            )
        # Before anything that defines a metric is imported (see sluice.telemetry.metrics_dir).
        prepare(config, fresh=args.command == "up")
        from sluice.cli import commands

        return asyncio.run(commands.dispatch(config, args))
    except SluiceError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a port in use, an unwritable data dir
        print(f"sluice: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
