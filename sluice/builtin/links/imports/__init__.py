"""Link imports: a CSV of links (sluice's own columns, or an export of Bitly, YOURLS or
Shlink) turned into links in the background, each row's outcome reported.

``formats`` reads the header row and maps each row to a draft link, ``uploads`` keeps
the uploaded file in the database until its job finishes, ``jobs`` keeps the job rows
(the ``jobs`` table, kind ``import``), ``rows`` applies one row (created, existing or
invalid), ``runner`` runs one job in batches from its checkpoint. The ``imports``
handler group (``sluice.builtin.links.imports.group``) calls the runner.
"""
