"""The operations app's routes (admin token) and the ``/admin`` page."""
