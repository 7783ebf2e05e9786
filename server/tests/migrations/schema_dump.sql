-- What a migrated schema is compared by: one query per line, run on Weir
-- and on PostgreSQL, whose answers must be equal.
SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position;
SELECT table_name, constraint_name, constraint_type FROM information_schema.table_constraints WHERE table_schema = 'public' AND constraint_type <> 'CHECK' ORDER BY table_name, constraint_name;
SELECT constraint_name, column_name, ordinal_position FROM information_schema.key_column_usage WHERE table_schema = 'public' ORDER BY constraint_name, ordinal_position;
SELECT constraint_name, unique_constraint_name, update_rule, delete_rule FROM information_schema.referential_constraints ORDER BY 1;
SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2;
SELECT table_name FROM information_schema.views WHERE table_schema = 'public' ORDER BY 1;
SELECT * FROM published_posts ORDER BY id;
SELECT id, author_id, title, status, slug FROM posts ORDER BY id;
SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c WHERE c.relname = 'posts';
