"""sluice's own handler groups, by name; an app's join them when it is loaded
(``sluice.app.loading.Apps.groups``, which every process asks for the groups it knows).
The projections' registry is ``sluice.projections.registry``; each runs as a group too."""

from __future__ import annotations

from collections.abc import Callable

from sluice.builtin.accounts.mail import group as mail
from sluice.builtin.links.exports import group as exports
from sluice.builtin.links.imports import group as imports
from sluice.builtin.links.webhooks import group as webhooks
from sluice.projections.base import Projection
from sluice.projections.registry import PROJECTIONS
from sluice.projections.runtime import projection_group
from sluice.resources import Resources
from sluice.streams.spec import GroupSpec


def _projection_group(projection: Projection) -> Callable[[Resources], GroupSpec]:
    return lambda resources: projection_group(projection, resources)


CORE_GROUPS: dict[str, Callable[[Resources], GroupSpec]] = {
    **{name: _projection_group(projection) for name, projection in PROJECTIONS.items()},
    mail.NAME: mail.group,
    exports.NAME: exports.group,
    imports.NAME: imports.group,
    webhooks.NAME: webhooks.group,
}
