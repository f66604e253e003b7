"""Export jobs: a CSV of a link's visits, built in the background from the event history.

``jobs`` keeps the job rows (request, progress, checkpoints, outcome), ``visits``
scans the history and formats CSV rows, ``chunks`` keeps the CSV's bytes in the
database, ``runner`` runs one job under its lock, ``retention`` removes old results.
The ``exports`` handler group (``sluice.builtin.links.exports.group``) calls the runner.
"""
