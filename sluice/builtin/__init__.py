"""The apps built into sluice, each declared through the public app API (``sluice.app``)
as an app of a user's would be; ``SLUICE_APPS`` names them (by default every one).

Each package holds its own events, routes, tables, groups, projections and tasks. It
may import sluice's core and ``sluice.app``, and another built-in app only where its
``App`` declares that app in ``requires``.
"""
