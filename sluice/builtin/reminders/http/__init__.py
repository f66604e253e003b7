"""The reminders app's routes (create, list, read, edit, pause and delete reminders, and
the one-click unsubscribe of their mails), their bodies and its aiohttp keys. Imports the
core's HTTP machinery, this app and the accounts app's signed mail links."""
