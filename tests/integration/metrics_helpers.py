"""Reading /metrics as the admin does: every sample by name and labels."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ADMIN_TOKEN = "metrics-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(client: Any) -> Samples:
    response = await client.get("/metrics", headers=ADMIN)
    assert response.status == 200, await response.text()
    assert response.content_type == "text/plain"
    samples: Samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
