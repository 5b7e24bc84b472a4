"""The config database: SQLAlchemy models, Alembic migrations, the store."""
