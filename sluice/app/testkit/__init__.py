"""What ``sluice.app.testing`` is made of: processes of a deployment (``processes``), what
a test reads of one (``deployment``) and the in-process harness (``harness``). Only the
names ``sluice.app.testing`` exports are public."""
