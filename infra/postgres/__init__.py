"""A throwaway PostgreSQL server for tests and local runs."""
