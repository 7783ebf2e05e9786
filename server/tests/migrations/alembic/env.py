"""Runs the migrations online against WEIR_MIGRATION_URL, comparing types
and server defaults so that `alembic check` sees every difference between
the models and the database."""
import os
import sys

from alembic import context
from sqlalchemy import create_engine

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402

engine = create_engine(os.environ["WEIR_MIGRATION_URL"])
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=models.metadata,
        compare_type=True,
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()
