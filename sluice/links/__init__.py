"""Short links: the pre-generated code pool, the link rules and the links repository."""
