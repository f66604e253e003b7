"""sluice's own projections by name, apart from the handler groups: ``sluice replay`` needs
these and nothing of the groups' handlers (mail, exports), which it does not import.
An app's projections join them when it is loaded (``sluice.app.loading.Apps``)."""

from __future__ import annotations

from sluice.builtin.links.stats import projection as link_stats
from sluice.projections.base import Projection

PROJECTIONS: dict[str, Projection] = {p.name: p for p in (link_stats.PROJECTION,)}
