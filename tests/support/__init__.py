"""Shared test helpers: clusters, node processes, raw S3 clients, PostgreSQL."""
