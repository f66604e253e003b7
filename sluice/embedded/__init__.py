"""Servers launched for development and the tests, never in production: a Redis
(``sluice up``'s embedded one), a Redis Cluster and a PostgreSQL on free loopback ports.
They import nothing of sluice but its errors."""
