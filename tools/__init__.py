"""Contributors' tools: not part of the installed package (``make reference``, ...)."""
