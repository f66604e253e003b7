"""sluice's side of bench/peers.py, run with sluice's own venv.

``python sluice_side.py worker GROUP CONSUMER``: ``sluice worker GROUP --consumer
CONSUMER``, with the group's batch handler wrapped to count the events it
finished (after the projection's transaction committed; XACK follows). GROUP
``bench-noop`` is a handler group that does nothing, registered here only.

``python sluice_side.py produce N``: N ``ArticleViewed`` committed 500 per
transaction, each commit announced to the relay as the API does; prints the
wall times around it as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from counter import done

from sluice.app.assembly import default_apps, open_resources
from sluice.builtin.articles.events import ArticleViewed
from sluice.cli.main import main as sluice_main
from sluice.config import load_config
from sluice.process.resources import Resources
from sluice.relay.notify import CommitNotifier
from sluice.streams.messages import Delivery, Recorded
from sluice.streams.spec import GroupSpec

Failures = Mapping[tuple[str, str], BaseException]


def _applied(outcome: BaseException) -> bool:
    return isinstance(outcome, Recorded) and not outcome.duplicate


def counted(make: Callable[[Resources], GroupSpec]) -> Callable[[Resources], GroupSpec]:
    def make_counted(resources: Resources) -> GroupSpec:
        spec = make(resources)

        async def handle(deliveries: Sequence[Delivery]) -> Failures:
            outcomes = await spec.handler(deliveries)
            # Entries named with Recorded were applied (and their attempt written with the
            # effect); every other name is a failure or a duplicate.
            named = sum(not _applied(e) for e in outcomes.values())
            done(len(deliveries) - named)
            return outcomes

        return replace(spec, handler=handle)  # the group's own batch size and hooks kept

    return make_counted


def noop_group(resources: Resources) -> GroupSpec:
    async def handle(deliveries: Sequence[Delivery]) -> Failures:
        return {}

    return GroupSpec(name="bench-noop", aggregates=("articles",), handler=handle)


async def produce(n: int, per_tx: int = 500) -> None:
    async with open_resources(load_config()) as res:
        notifier = CommitNotifier(res.redis, res.keys.outbox_channel())
        res.store.add_commit_listener(notifier.notify)
        for i in range(0, n, per_tx):
            async with res.store.transaction() as tx:
                await tx.append(
                    *(
                        ArticleViewed(article_id=f"a{j % 50}", viewer=str(j))
                        for j in range(i, min(n, i + per_tx))
                    )
                )
        await notifier.close()
        await res.redis.publish(res.keys.outbox_channel(), b"1")  # in case close cut one short


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        started = time.time()
        asyncio.run(produce(int(sys.argv[2])))
        print(json.dumps({"start": started, "end": time.time()}), flush=True)
    else:
        default_apps().groups["bench-noop"] = noop_group
        group = sys.argv[2]
        default_apps().groups[group] = counted(default_apps().groups[group])
        sys.exit(sluice_main(["worker", group, "--consumer", sys.argv[3]]))
