"""Password hashing (``passwords``) and the data dir's private files
(``secret_files``); nothing of the engine, so every layer may use them."""
