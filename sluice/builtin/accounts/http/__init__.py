"""The accounts app's routes (users, tokens, email verification), their bodies and its
aiohttp keys. Imports the core's HTTP machinery and this app."""
