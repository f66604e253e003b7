"""The reminders app's routes: create, list, read, edit, pause and delete reminders."""
