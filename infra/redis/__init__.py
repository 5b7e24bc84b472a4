"""Local Redis for development and tests: Debian's ``redis-server``, throwaway instances."""
