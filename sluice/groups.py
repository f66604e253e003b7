"""The registry of handler groups and projections: the one place that names them."""

from __future__ import annotations

from collections.abc import Callable

from sluice.handlers import exports, mail
from sluice.projections import article_views, link_stats
from sluice.projections.base import Projection
from sluice.projections.runtime import projection_group
from sluice.resources import Resources
from sluice.streams.spec import GroupSpec

PROJECTIONS: dict[str, Projection] = {
    p.name: p for p in (article_views.PROJECTION, link_stats.PROJECTION)
}


def _projection_group(projection: Projection) -> Callable[[Resources], GroupSpec]:
    return lambda resources: projection_group(projection, resources)


GROUPS: dict[str, Callable[[Resources], GroupSpec]] = {
    **{name: _projection_group(projection) for name, projection in PROJECTIONS.items()},
    mail.NAME: mail.group,
    exports.NAME: exports.group,
}
