"""The projections by name, apart from the handler groups: ``sluice replay`` needs these
and nothing of the groups' handlers (mail, exports), which it does not import."""

from __future__ import annotations

from sluice.projections import article_views, link_stats
from sluice.projections.base import Projection

PROJECTIONS: dict[str, Projection] = {
    p.name: p for p in (article_views.PROJECTION, link_stats.PROJECTION)
}
