"""The consumer-group runtime: one ``Consumer`` per group and partition
(``consumer``) with the parts it holds (``handling``, ``outcomes``, ``claims``), the
process's recovery gate (``recovery``) and per-event dispatch (``dispatch``)."""
