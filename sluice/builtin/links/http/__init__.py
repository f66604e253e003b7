"""The links app's routes (links, stats, QR codes, imports, export jobs, webhooks, orphan
visits, and the redirect with its password form), their bodies, its aiohttp keys and its
answers on the core's fast path. Imports the core's HTTP machinery and this app."""
