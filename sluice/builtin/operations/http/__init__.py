"""The operations app's routes (admin token) and the ``/admin`` page that calls them.
Imports the core's HTTP machinery and what the core records (``sluice.streams``)."""
