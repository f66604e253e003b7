"""The links app's routes: links, their stats, QR codes, imports, export jobs, webhooks,
orphan visits, and the redirect with its password form."""
