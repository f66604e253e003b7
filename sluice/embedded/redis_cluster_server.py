"""A local Redis Cluster from the ``redis-server`` binary: primaries and replicas on free
loopback ports, for the tests and the benchmarks (``SLUICE_REDIS_CLUSTER_NODES``).

Each node is a ``RedisServer`` with ``cluster-enabled yes``, its node table in its own
data directory (so a node killed and started again rejoins with its id, as a
replica of whoever took over), the same password for clients and for replication
(``masterauth``), and a short ``cluster-node-timeout`` so that a failover takes
about a second. The cluster bus listens on port + 10000 (Redis 6.2 has no
``cluster-port``), so a node's port is picked with that one free too. Slots are
split evenly over the primaries, with the commands of ``redis-cli --cluster
create`` spoken directly: ADDSLOTS, MEET, REPLICATE; then it waits until every
node says the cluster is ok and every replica is in sync.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from sluice.embedded.redis_server import RedisServer, RedisServerError, free_port

SLOTS = 16384
BUS_OFFSET = 10_000


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose bus port (+10000) is free and valid too."""
    while True:
        port = free_port()
        if port + BUS_OFFSET < 65536 and _bindable(port + BUS_OFFSET):
            return port


@dataclass
class RedisCluster:
    """``primaries`` primaries with ``replicas`` replicas each, under ``data_dir``."""

    data_dir: Path
    primaries: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1000
    password: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def seeds(self) -> str:
        """``SLUICE_REDIS_CLUSTER_NODES``: every node's address."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start(self, timeout: float = 30.0) -> None:
        settings = (
            "cluster-enabled yes\n"
            "cluster-config-file nodes.conf\n"
            f"cluster-node-timeout {self.node_timeout_ms}\n"
            f"masterauth {self.password}\n"
            # A replica may answer reads meanwhile; sluice reads primaries only.
            "cluster-require-full-coverage no\n"
        )
        count = self.primaries * (1 + self.replicas)
        for i in range(count):
            node = RedisServer(
                self.data_dir / f"node-{i}",
                port=cluster_port(),
                password=self.password,
                extra_config=settings,
            )
            self.nodes.append(node)
            node.start()
        try:
            self._create(timeout)
        except BaseException:
            self.stop()
            raise

    def _client(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(port=node.port, password=self.password, socket_timeout=5)

    def _create(self, timeout: float) -> None:
        primaries = self.nodes[: self.primaries]
        per = SLOTS // self.primaries
        for i, node in enumerate(primaries):
            last = SLOTS if i == self.primaries - 1 else (i + 1) * per
            with self._client(node) as client:
                client.execute_command("CLUSTER ADDSLOTS", *range(i * per, last))
        with self._client(self.nodes[0]) as first:
            for node in self.nodes[1:]:
                first.execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        ids = [self._node_id(node) for node in primaries]
        self._wait(timeout, "every node to know the others", self._all_known)
        for i, node in enumerate(self.nodes[self.primaries :]):
            with self._client(node) as client:
                client.execute_command("CLUSTER REPLICATE", ids[i % self.primaries])
        self._wait(timeout, "the cluster to be ok with replicas in sync", self._ready)

    def _node_id(self, node: RedisServer) -> str:
        with self._client(node) as client:
            return str(client.execute_command("CLUSTER MYID").decode())

    def _all_known(self) -> bool:
        for node in self.nodes:
            with self._client(node) as client:
                if len(client.execute_command("CLUSTER NODES")) < len(self.nodes):
                    return False
        return True

    def _ready(self) -> bool:
        for node in self.live():
            with self._client(node) as client:
                info = client.execute_command("CLUSTER INFO")
                if info.get("cluster_state") != "ok":
                    return False
                replication = client.info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
        return True

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every live node says the cluster is ok and its replicas are in sync."""
        self._wait(timeout, "the cluster to be ok with replicas in sync", self._ready)

    def _wait(self, timeout: float, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RedisServerError(f"timed out waiting for {what}")

    def live(self) -> Iterator[RedisServer]:
        return (node for node in self.nodes if node.process is not None)

    def primary_nodes(self) -> list[RedisServer]:
        """The live nodes that are primaries now (after a failover, not the first ones)."""
        found = []
        for node in self.live():
            with self._client(node) as client:
                if client.info("replication")["role"] == "master":
                    found.append(node)
        return found

    def flush(self) -> None:
        """Every key of every primary deleted (a test's fresh start)."""
        for node in self.primary_nodes():
            client = self._client(node)
            try:
                client.flushall()
            finally:
                client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
