"""The projection engine (core): read models built from events, each event counted once
by its processed row, kept live by a group of their own and rebuilt by ``replay``. Knows
no projection: the apps declare theirs. Imports the store, streams and events only."""
