"""The blog migration (tests/migrations/blog) in alembic's operations, so
SQLAlchemy's DDL compiler writes the SQL: identity and serial keys, foreign
keys with actions, unique and check constraints, indexes, added and renamed
columns, seed data, a backfill UPDATE, SET NOT NULL, a view and a comment.

Revision ID: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade():
    op.create_table(
        "authors",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("email", sa.String(255), nullable=False, unique=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_table(
        "posts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("author_id", sa.BigInteger,
                  sa.ForeignKey("authors.id", ondelete="CASCADE"), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("body", sa.Text),
        sa.Column("status", sa.Text, nullable=False, server_default="draft"),
        sa.Column("published_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("status IN ('draft', 'published')", name="posts_status_check"),
    )
    op.create_index("posts_author_id_idx", "posts", ["author_id"])
    op.create_table(
        "tags",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("label", sa.Text, nullable=False),
    )
    op.create_index("tags_label_key", "tags", ["label"], unique=True)
    op.create_table(
        "post_tags",
        sa.Column("post_id", sa.Integer, sa.ForeignKey("posts.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("tag_id", sa.Integer, sa.ForeignKey("tags.id"), primary_key=True),
    )
    op.add_column("authors", sa.Column("bio", sa.Text))
    op.alter_column("posts", "body", new_column_name="content")
    op.add_column("posts", sa.Column("slug", sa.Text))
    authors = sa.table("authors", sa.column("email"), sa.column("name"))
    op.bulk_insert(authors, [
        {"email": "ada@x.org", "name": "Ada"},
        {"email": "bob@x.org", "name": "Bob"},
    ])
    posts = sa.table("posts", sa.column("author_id"), sa.column("title"),
                     sa.column("status"))
    op.bulk_insert(posts, [
        {"author_id": 1, "title": "Hello", "status": "published"},
        {"author_id": 1, "title": "Draft", "status": "draft"},
        {"author_id": 2, "title": "Bob's", "status": "published"},
    ])
    op.execute("INSERT INTO tags (label) VALUES ('rust'), ('sql')")
    op.execute("INSERT INTO post_tags VALUES (1, 1), (1, 2), (3, 2)")
    op.execute("UPDATE posts SET slug = lower(replace(title, ' ', '-')) WHERE slug IS NULL")
    op.alter_column("posts", "slug", nullable=False)
    op.create_unique_constraint("posts_slug_key", "posts", ["slug"])
    op.execute(
        "CREATE VIEW published_posts AS SELECT p.id, p.title, a.name AS author "
        "FROM posts p JOIN authors a ON a.id = p.author_id WHERE p.status = 'published'"
    )
    op.create_table_comment("posts", "Blog posts")


def downgrade():
    op.execute("DROP VIEW published_posts")
    op.drop_table("post_tags")
    op.drop_table("tags")
    op.drop_table("posts")
    op.drop_table("authors")
