"""Handler groups of plain per-event functions, one module per group (``mail``)."""
