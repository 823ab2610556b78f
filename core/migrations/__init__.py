"""The database schema's history as Alembic revisions (versions/), applied by core.db.upgrade_database."""
