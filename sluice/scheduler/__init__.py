"""The scheduler: cron tasks once per occurrence, run records, reminders."""
