"""The scheduler engine (core): six-field cron in wall-clock time, slots claimed once per
occurrence, locks, run records, policies, the core's own tasks, and the due runner of
one-shots and delayed jobs. Apps add tasks, services and purges through ``sluice.app``,
which the registry asks; it imports no app."""
