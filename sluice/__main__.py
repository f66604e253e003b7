"""The ``sluice`` command: argument parsing -> load_config -> configure_logging -> command."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence

import structlog

from sluice.config import load_config
from sluice.errors import SluiceError
from sluice.logs import configure_logging
from sluice.metrics_env import prepare
from sluice.operations import event_search
from sluice.secret_files import make_private
from sluice.stop_signals import catch_early


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("up", help="API, relay and every handler group, with embedded Redis if needed")
    api = sub.add_parser("api", help="serve the HTTP API")
    api.add_argument(
        "--processes", type=_positive, metavar="N",
        help="serve the port from N processes (default: SLUICE_API_PROCESSES, 1)",
    )  # fmt: skip
    # A child of ``--processes``: binds its port beside its siblings (SO_REUSEPORT).
    api.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    sub.add_parser("relay", help="publish committed events to Redis Streams")
    worker = sub.add_parser("worker", help="run handler groups")
    worker.add_argument("groups", nargs="+", metavar="GROUP")
    worker.add_argument("--consumer", help="consumer name (default: the host name)")
    sub.add_parser("scheduler", help="run cron tasks (once per occurrence) and reminders")
    tasks = sub.add_parser("tasks", help="scheduled tasks: list them, run one now")
    tasks_sub = tasks.add_subparsers(dest="action", required=True)
    tasks_sub.add_parser("list")
    tasks_run = tasks_sub.add_parser("run", help="run a task now, under its lock, and wait")
    tasks_run.add_argument("name")
    sub.add_parser("migrate", help="apply database migrations and exit")
    copy = sub.add_parser(
        "copy-store",
        help="copy the whole store into an empty database (stop the deployment first)",
        description="Copy the whole store (event history, state, positions) of"
        " SLUICE_DATABASE_URL into an empty database, then check the counts. Stop the"
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
    copy.add_argument("--no-progress", action="store_true")
    replay = sub.add_parser("replay", help="rebuild a projection from the event history")
    replay.add_argument("projection")
    replay.add_argument("--no-progress", action="store_true")
    status = sub.add_parser("status", help="streams, groups, lag, pending, dead letters")
    status.add_argument("--json", action="store_true")
    dlq = sub.add_parser("dlq", help="dead letters: list, redrive, drop")
    dlq_sub = dlq.add_subparsers(dest="action", required=True)
    dlq_list = dlq_sub.add_parser("list")
    dlq_list.add_argument("--group")
    dlq_list.add_argument("--limit", type=int, default=50)
    one_help = "GROUP may be left out when only one group holds ID"
    dlq_redrive = dlq_sub.add_parser(
        "redrive", help=f"one dead letter ({one_help}), or every one --group/--type match"
    )
    dlq_redrive.add_argument("target", nargs="*", metavar="[GROUP] ID")
    dlq_redrive.add_argument("--group", help="without ID: every dead letter of this group")
    dlq_redrive.add_argument("--type", help="without ID: every dead letter of this event type")
    dlq_drop = dlq_sub.add_parser("drop", help=one_help)
    dlq_drop.add_argument("target", nargs="+", metavar="[GROUP] ID")
    groups = sub.add_parser("groups", help="handler groups: list them, pause one, resume one")
    groups_sub = groups.add_subparsers(dest="action", required=True)
    groups_sub.add_parser("list", help="every group, running or paused (since when)")
    groups_pause = groups_sub.add_parser(
        "pause", help="stop the group's consumers on every host (within 2 s; kept until resumed)"
    )
    groups_pause.add_argument("name", metavar="GROUP")
    groups_resume = groups_sub.add_parser("resume", help="let a paused group take entries again")
    groups_resume.add_argument("name", metavar="GROUP")
    events = sub.add_parser(
        "events",
        help="search the event history, newest first (type, aggregate, trace id, time)",
        description="The events of the hot history, newest first, as GET /v1/admin/events"
        " finds them; archived events are not searched. Times are RFC 3339 with an offset.",
    )
    # Checked by the command: the apps (SLUICE_APPS) add event types and aggregates.
    events.add_argument("--type")
    events.add_argument("--aggregate")
    events.add_argument("--trace-id", type=_searched(event_search.trace_id))
    events.add_argument("--since", type=_searched(event_search.instant), help="inclusive")
    events.add_argument("--until", type=_searched(event_search.instant), help="exclusive")
    events.add_argument(
        "--limit", type=_searched(event_search.page_limit), default=event_search.LIMIT_DEFAULT,
        help=f"events per page, 1 to {event_search.LIMIT_MAX}",
    )  # fmt: skip
    events.add_argument("--cursor", type=_searched(event_search.decode_cursor),
                        help="the next page, as the previous one printed it")  # fmt: skip
    events.add_argument("--json", action="store_true", help="the page as the API returns it")
    return parser


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


# The commands that run until they are stopped (sluice.stop_signals).
SERVICES = frozenset({"up", "api", "relay", "worker", "scheduler"})


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
        # Before anything that defines a metric is imported (see sluice.metrics_env).
        prepare(config, fresh=args.command == "up")
        from sluice import commands

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
