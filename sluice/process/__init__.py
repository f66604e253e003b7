"""What a long-running process sets up: its resources (``resources``, the
assembly point of workers and commands) and its graceful stop (``stop_signals``)."""
