"""The blog schema as SQLAlchemy models: what `alembic check` compares the
migrated database with."""
from sqlalchemy import (
    BigInteger, CheckConstraint, Column, DateTime, ForeignKey, Identity, Index,
    Integer, MetaData, String, Table, Text, UniqueConstraint, text,
)

metadata = MetaData()

authors = Table(
    "authors", metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("email", String(255), nullable=False, unique=True),
    Column("name", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False,
           server_default=text("now()")),
    Column("bio", Text),
)

posts = Table(
    "posts", metadata,
    Column("id", Integer, primary_key=True),
    Column("author_id", BigInteger,
           ForeignKey("authors.id", ondelete="CASCADE"), nullable=False),
    Column("title", Text, nullable=False),
    Column("content", Text),
    Column("status", Text, nullable=False, server_default=text("'draft'::text")),
    Column("published_at", DateTime(timezone=True)),
    Column("slug", Text, nullable=False),
    CheckConstraint("status IN ('draft', 'published')", name="posts_status_check"),
    UniqueConstraint("slug", name="posts_slug_key"),
    Index("posts_author_id_idx", "author_id"),
    comment="Blog posts",
)

tags = Table(
    "tags", metadata,
    Column("id", Integer, primary_key=True),
    Column("label", Text, nullable=False),
    Index("tags_label_key", "label", unique=True),
)

post_tags = Table(
    "post_tags", metadata,
    Column("post_id", Integer, ForeignKey("posts.id", ondelete="CASCADE"),
           primary_key=True),
    Column("tag_id", Integer, ForeignKey("tags.id"), primary_key=True),
)
