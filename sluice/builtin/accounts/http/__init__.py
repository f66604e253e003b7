"""The accounts app's routes: users, tokens, email verification."""
