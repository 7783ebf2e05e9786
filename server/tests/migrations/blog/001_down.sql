-- The down migration of 001_up.sql.
DROP VIEW published_posts;
DROP TABLE post_tags;
DROP TABLE tags;
DROP TABLE posts;
DROP TABLE authors;
