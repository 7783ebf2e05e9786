//! The query shapes of the differential test, over the tables of
//! [`super::TABLES`]: `a (id, k, g, v, t)` with a primary key and `b (id, k,
//! h, w, n, f)` without one.

/// A projection query. `base`, if set, is created first as projection
/// `base`, and `query` reads it: a projection over a projection.
pub struct Shape {
    pub name: &'static str,
    pub query: &'static str,
    pub base: Option<&'static str>,
}

const fn shape(name: &'static str, query: &'static str) -> Shape {
    Shape {
        name,
        query,
        base: None,
    }
}

const fn nested(name: &'static str, base: &'static str, query: &'static str) -> Shape {
    Shape {
        name,
        query,
        base: Some(base),
    }
}

/// Top-N shapes order by a total order (ties broken by `id`), so the
/// answer is unique; RANK keeps all ties, so it needs none.
pub const SHAPES: &[Shape] = &[
    // Scalar expressions and filters.
    shape(
        "filter_project",
        "SELECT id, k, v * 2 + 1 AS v2, upper(g) AS ug, t + INTERVAL '1' MINUTE AS t1 FROM a WHERE v > 5 OR g = 'x'",
    ),
    shape(
        "scalar_functions",
        "SELECT id, greatest(v, k) AS gv, least(v, k) AS lv, nullif(g, 'x') AS ng, extract(second FROM t) AS s, t < '2024-01-01 00:00:30' AS early FROM a WHERE v NOT IN (1, 2, 3) OR g LIKE 'x%'",
    ),
    shape(
        "scalar_exprs",
        "SELECT id, CASE WHEN v > 10 THEN 'hi' WHEN v IS NULL THEN 'none' ELSE 'lo' END AS c, coalesce(g, '?') || '-' || CAST(k AS text) AS s, v % 3 AS m FROM a WHERE k IN (0, 1, 2)",
    ),
    // Constants and empty relations.
    // Interval arithmetic: whole days and seconds are durations, a month is
    // calendar arithmetic.
    shape(
        "interval_arithmetic",
        "SELECT id, t - INTERVAL '1 day 2 hours' AS back, t + INTERVAL '1.5' SECOND AS on, t + INTERVAL '1' MONTH AS later FROM a",
    ),
    shape("constant_column", "SELECT 1 AS one, k FROM a WHERE v > 3"),
    shape("distinct_constant", "SELECT DISTINCT 1 AS one FROM a"),
    shape("where_false", "SELECT k FROM a WHERE false"),
    shape("limit_zero", "SELECT id FROM a ORDER BY id LIMIT 0"),
    shape(
        "count_where_false",
        "SELECT count(*) AS n FROM a WHERE 1 = 0",
    ),
    shape(
        "values_join",
        "SELECT v.name, a.id FROM (VALUES (1, 'one'), (2, 'two'), (NULL, 'none')) v(k, name) JOIN a ON a.k = v.k",
    ),
    shape(
        "union_values",
        "SELECT k, v FROM a UNION ALL VALUES (99, 99)",
    ),
    // Joins.
    shape(
        "inner_join",
        "SELECT a.id, b.id AS bid, a.v, b.w, b.h FROM a JOIN b ON a.k = b.k",
    ),
    shape(
        "inner_join_residual",
        "SELECT a.id, b.id AS bid FROM a JOIN b ON a.k = b.k AND a.v < b.w",
    ),
    shape(
        "two_key_join",
        "SELECT a.id, b.id AS bid, a.g FROM a JOIN b ON a.k = b.k AND a.g = b.h",
    ),
    shape(
        "left_join",
        "SELECT a.id, a.k, b.id AS bid, b.w FROM a LEFT JOIN b ON a.k = b.k AND b.w > 5",
    ),
    shape(
        "right_join",
        "SELECT a.id, b.id AS bid, b.k FROM a RIGHT JOIN b ON a.k = b.k AND a.v > b.w",
    ),
    shape(
        "full_join",
        "SELECT a.id, a.v, b.id AS bid, b.w FROM a FULL JOIN b ON a.k = b.k AND a.v <> b.w",
    ),
    shape(
        "left_join_is_null",
        "SELECT a.id, a.g FROM a LEFT JOIN b ON a.k = b.k WHERE b.id IS NULL",
    ),
    shape(
        "mixed_type_join",
        "SELECT a.id, b.id AS bid FROM a JOIN b ON a.k = b.k AND a.v = b.n",
    ),
    shape(
        "range_join_count",
        "SELECT count(*) AS n FROM a, b WHERE a.v > b.w",
    ),
    shape(
        "range_join",
        "SELECT a.id, b.id AS bid FROM a JOIN b ON a.v BETWEEN b.w - 1 AND b.w + 1",
    ),
    shape(
        "cross_join_agg",
        "SELECT a.g, b.h, count(*) AS c, sum(a.v + b.w) AS s FROM a CROSS JOIN b GROUP BY a.g, b.h",
    ),
    shape(
        "self_join",
        "SELECT x.id, y.id AS yid, x.k FROM a x JOIN a y ON x.k = y.k AND x.id < y.id",
    ),
    shape(
        "three_way_join",
        "SELECT a.id, b.id AS bid, c.id AS cid FROM a JOIN b ON a.k = b.k LEFT JOIN a c ON c.v = b.w",
    ),
    shape(
        "using_join",
        "SELECT k, a.id, b.id AS bid FROM a JOIN b USING (k)",
    ),
    shape("natural_join", "SELECT * FROM a NATURAL JOIN b"),
    shape(
        "left_join_count",
        "SELECT a.g, count(b.id) AS matches, count(*) AS n FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.g",
    ),
    shape(
        "full_join_agg",
        "SELECT coalesce(a.k, b.k) AS k, count(a.id) AS na, count(b.id) AS nb FROM a FULL JOIN b ON a.k = b.k GROUP BY coalesce(a.k, b.k)",
    ),
    // Aggregates.
    shape(
        "sum_count_avg",
        "SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS s, avg(v) AS m FROM a GROUP BY k",
    ),
    shape(
        "min_max",
        "SELECT g, min(v) AS lo, max(v) AS hi, min(t) AS first, max(t) AS last, max(id) AS top FROM a GROUP BY g",
    ),
    shape(
        "count_distinct",
        "SELECT k, count(DISTINCT v) AS dv, count(DISTINCT g) AS dg, sum(DISTINCT v) AS sdv FROM a GROUP BY k",
    ),
    shape(
        "bool_aggs",
        "SELECT g, bool_and(v > 5) AS all_big, bool_or(v IS NULL) AS any_null FROM a GROUP BY g",
    ),
    shape(
        "filter_clause",
        "SELECT k, count(*) FILTER (WHERE v > 10) AS big, sum(v) FILTER (WHERE g = 'x') AS sx, max(v) FILTER (WHERE g <> 'x') AS mx FROM a GROUP BY k",
    ),
    shape(
        "having",
        "SELECT g, sum(v) AS s, count(*) AS n FROM a GROUP BY g HAVING count(*) > 2 AND max(v) >= 10",
    ),
    shape(
        "global_agg",
        "SELECT count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi, count(DISTINCT k) AS dk FROM a",
    ),
    shape("count_star", "SELECT count(*) AS n FROM a"),
    shape(
        "count_star_where",
        "SELECT count(*) AS n FROM a WHERE v > 3",
    ),
    shape(
        "group_by_constant",
        "SELECT 'all' AS grp, count(*) AS n FROM a GROUP BY grp",
    ),
    shape(
        "count_distinct_filter",
        "SELECT k, count(DISTINCT v) FILTER (WHERE g <> 'x') AS d FROM a GROUP BY k",
    ),
    shape(
        "global_having",
        "SELECT count(DISTINCT g) AS dg FROM a HAVING count(*) > 5",
    ),
    shape(
        "numeric_agg",
        "SELECT h, sum(n) AS s, avg(n) AS m, min(n) AS lo, max(n) AS hi, count(*) AS c FROM b GROUP BY h",
    ),
    shape(
        "group_by_expression",
        "SELECT v / 5 AS bucket, k IS NULL AS nk, count(*) AS n, sum(k) AS s FROM a GROUP BY v / 5, k IS NULL",
    ),
    shape(
        "agg_of_expressions",
        "SELECT g, sum(v * k) AS s, max(coalesce(CAST(v AS text), 'none')) AS mx, min(length(g) + v) AS lo, sum(CASE WHEN k = 1 THEN v ELSE 0 END) AS s1 FROM a GROUP BY g",
    ),
    shape(
        "distinct_aggs",
        "SELECT k, avg(DISTINCT v) AS adv, max(DISTINCT g) AS mg, count(DISTINCT t) AS dt FROM a GROUP BY k",
    ),
    shape(
        "having_spread",
        "SELECT k, max(v) - min(v) AS spread FROM a GROUP BY k HAVING count(DISTINCT v) > 1",
    ),
    shape(
        "having_only",
        "SELECT k FROM a GROUP BY k HAVING min(v) < 5",
    ),
    shape(
        "float_agg",
        "SELECT h, min(f) + 0.0 AS lo, max(f) + 0.0 AS hi, count(DISTINCT f) AS df, sum(f) + 0.0 AS s FROM b GROUP BY h",
    ),
    shape(
        "float_group",
        "SELECT f + 0.0 AS f, count(*) AS n, sum(w) AS s FROM b WHERE f IS DISTINCT FROM 2.5 GROUP BY f",
    ),
    shape(
        "float_self_join",
        "SELECT x.id, y.id AS yid FROM b x JOIN b y ON x.f = y.f AND x.id < y.id",
    ),
    shape(
        "numeric_group",
        "SELECT n, count(*) AS c, max(w) AS hi FROM b GROUP BY n",
    ),
    shape(
        "variance",
        "SELECT k, round(stddev(v), 6) AS sd, round(var_pop(v), 6) AS vp FROM a GROUP BY k",
    ),
    // DISTINCT.
    shape("distinct", "SELECT DISTINCT k, g FROM a"),
    shape(
        "distinct_union",
        "SELECT DISTINCT k FROM (SELECT k FROM a UNION ALL SELECT k FROM b) u",
    ),
    shape(
        "distinct_expressions",
        "SELECT DISTINCT v % 4 AS r, g IS NULL AS ng FROM a",
    ),
    shape(
        "distinct_join",
        "SELECT DISTINCT a.g, b.h FROM a JOIN b ON a.k = b.k",
    ),
    // Top-N.
    shape(
        "top_n",
        "SELECT id, v, g FROM a ORDER BY v DESC NULLS LAST, id LIMIT 5",
    ),
    shape(
        "top_n_offset",
        "SELECT id, v FROM a ORDER BY v NULLS FIRST, id DESC LIMIT 4 OFFSET 3",
    ),
    shape(
        "top_n_of_aggregate",
        "SELECT g, sum(v) AS s FROM a GROUP BY g ORDER BY s DESC NULLS LAST, g NULLS FIRST LIMIT 2",
    ),
    shape(
        "top_n_of_join",
        "SELECT a.id, b.id AS bid, a.v + b.w AS s FROM a JOIN b ON a.k = b.k ORDER BY s DESC NULLS LAST, a.id, b.id LIMIT 5",
    ),
    shape(
        "row_number_per_partition",
        "SELECT * FROM (SELECT id, k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, id) AS rn FROM a) s WHERE rn <= 2",
    ),
    shape(
        "rank_per_partition",
        "SELECT * FROM (SELECT id, g, v, RANK() OVER (PARTITION BY g ORDER BY v) AS r FROM a) s WHERE r <= 2",
    ),
    shape(
        "rank_partition_expression",
        "SELECT * FROM (SELECT id, k, v, RANK() OVER (PARTITION BY k % 2 ORDER BY v DESC) AS r FROM a) s WHERE r <= 2",
    ),
    shape(
        "row_number_global",
        "SELECT id, v, rn FROM (SELECT id, v, ROW_NUMBER() OVER (ORDER BY v, id) AS rn FROM a) s WHERE rn <= 3",
    ),
    shape(
        "top_n_in_subquery",
        "SELECT t.id, b.id AS bid FROM (SELECT id, k FROM a ORDER BY v DESC NULLS LAST, id LIMIT 3) t JOIN b ON t.k = b.k",
    ),
    shape(
        "row_number_extra_filter",
        "SELECT * FROM (SELECT id, k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v, id) AS rn FROM a) s WHERE rn <= 3 AND v > 4 AND k <> 1",
    ),
    shape(
        "row_number_range",
        "SELECT * FROM (SELECT id, v, ROW_NUMBER() OVER (ORDER BY v DESC, id) AS rn FROM a) s WHERE rn BETWEEN 2 AND 4",
    ),
    shape(
        "rank_of_aggregate",
        "SELECT * FROM (SELECT k, g, sum(v) AS s, RANK() OVER (PARTITION BY k ORDER BY sum(v) DESC NULLS LAST) AS r FROM a GROUP BY k, g) x WHERE r <= 1",
    ),
    shape(
        "row_number_of_join",
        "SELECT * FROM (SELECT b.h, a.id, b.id AS bid, ROW_NUMBER() OVER (PARTITION BY b.h ORDER BY a.id, b.id) AS rn FROM a JOIN b ON a.k = b.k) s WHERE rn < 3",
    ),
    // Window table functions.
    shape(
        "tumble",
        "SELECT window_start, window_end, count(*) AS n, sum(v) AS s, max(v) AS hi FROM TUMBLE(a, t, INTERVAL '10' SECOND) GROUP BY window_start, window_end",
    ),
    shape(
        "hop",
        "SELECT window_start, k, max(v) AS hi, count(*) AS n FROM HOP(a, t, INTERVAL '5' SECOND, INTERVAL '15' SECOND) GROUP BY window_start, k",
    ),
    shape(
        "hop_top_n",
        "SELECT * FROM (SELECT window_start, id, v, ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY v DESC, id) AS rn FROM HOP(a, t, INTERVAL '10' SECOND, INTERVAL '20' SECOND)) s WHERE rn <= 2",
    ),
    shape(
        "tumble_join",
        "SELECT w.window_start, b.h, count(*) AS n FROM TUMBLE(a, t, INTERVAL '20' SECOND) w JOIN b ON w.k = b.k GROUP BY w.window_start, b.h",
    ),
    // UNION ALL.
    shape(
        "union_all",
        "SELECT k, v FROM a WHERE v < 10 UNION ALL SELECT k, w FROM b",
    ),
    shape(
        "union_all_same_table",
        "SELECT id, v FROM a UNION ALL SELECT id, v FROM a WHERE v > 5",
    ),
    shape(
        "union_all_agg",
        "SELECT k, count(*) AS n, sum(x) AS s FROM (SELECT k, v AS x FROM a UNION ALL SELECT k, w FROM b) u GROUP BY k",
    ),
    shape(
        "union_all_of_aggs",
        "SELECT 'a' AS src, k, count(*) AS n FROM a GROUP BY k UNION ALL SELECT 'b', k, count(*) FROM b GROUP BY k",
    ),
    // Semi and anti joins.
    shape(
        "exists",
        "SELECT id, k, v FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.w > a.v)",
    ),
    shape(
        "in_subquery",
        "SELECT id, v FROM a WHERE k IN (SELECT k FROM b WHERE w > 10)",
    ),
    shape(
        "not_exists",
        "SELECT id, k FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
    ),
    shape(
        "not_exists_two_keys",
        "SELECT id FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.h = a.g)",
    ),
    shape(
        "semi_join_then_agg",
        "SELECT g, count(*) AS n FROM a WHERE id IN (SELECT id FROM b) GROUP BY g",
    ),
    shape(
        "exists_uncorrelated",
        "SELECT id FROM a WHERE EXISTS (SELECT 1 FROM b WHERE w > 15)",
    ),
    shape(
        "not_exists_uncorrelated",
        "SELECT id FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE w > 15)",
    ),
    shape(
        "in_expression",
        "SELECT id FROM a WHERE v + 1 IN (SELECT w FROM b)",
    ),
    shape(
        "argmax_by_anti_join",
        "SELECT id, k, v FROM a x WHERE NOT EXISTS (SELECT 1 FROM a y WHERE y.k = x.k AND y.v > x.v)",
    ),
    shape(
        "not_in_text",
        "SELECT id FROM a WHERE g NOT IN (SELECT h FROM b WHERE k = 1)",
    ),
    shape(
        "not_in",
        "SELECT id, k FROM a WHERE k NOT IN (SELECT k FROM b WHERE w > 5)",
    ),
    // CTEs and subqueries in FROM.
    shape(
        "cte",
        "WITH big AS (SELECT * FROM a WHERE v >= 10) SELECT big.g, count(*) AS n, max(b.w) AS hi FROM big JOIN b ON big.k = b.k GROUP BY big.g",
    ),
    shape(
        "cte_twice",
        "WITH s AS (SELECT k, sum(v) AS total FROM a GROUP BY k) SELECT x.k, x.total, y.k AS k2 FROM s x JOIN s y ON x.total < y.total",
    ),
    // The same subquery twice (Nexmark q5's shape): lowered once, its
    // aggregate read by both the join and the max over it.
    shape(
        "same_subquery_twice",
        "SELECT c.k, c.window_start, c.n FROM (SELECT k, window_start, count(*) AS n FROM HOP(a, t, INTERVAL '5' SECOND, INTERVAL '10' SECOND) GROUP BY k, window_start) c JOIN (SELECT window_start, max(n) AS top FROM (SELECT k, window_start, count(*) AS n FROM HOP(a, t, INTERVAL '5' SECOND, INTERVAL '10' SECOND) GROUP BY k, window_start) m GROUP BY window_start) x ON c.window_start = x.window_start AND c.n >= x.top",
    ),
    shape(
        "subquery_in_from",
        "SELECT s.k, s.total FROM (SELECT k, sum(v) AS total FROM a GROUP BY k) s WHERE s.total > 20",
    ),
    shape(
        "join_of_aggregates",
        "SELECT x.k, x.c, y.m FROM (SELECT k, count(*) AS c FROM a GROUP BY k) x FULL JOIN (SELECT k, max(w) AS m FROM b GROUP BY k) y ON x.k = y.k",
    ),
    // Projections over projections.
    nested(
        "nested_aggregate",
        "SELECT k, g, sum(v) AS s, count(*) AS c FROM a GROUP BY k, g",
        "SELECT g, max(s) AS hi, sum(c) AS n FROM base GROUP BY g",
    ),
    nested(
        "nested_top_n",
        "SELECT a.id, a.v, b.w FROM a JOIN b ON a.k = b.k",
        "SELECT * FROM (SELECT id, v, w, ROW_NUMBER() OVER (PARTITION BY id ORDER BY w DESC NULLS LAST, v) AS rn FROM base) s WHERE rn = 1",
    ),
    nested(
        "nested_over_top_n",
        "SELECT id, v FROM a ORDER BY v DESC NULLS LAST, id LIMIT 6",
        "SELECT count(*) AS n, sum(v) AS s, min(id) AS lo FROM base",
    ),
    nested(
        "nested_over_union",
        "SELECT k, v AS x FROM a UNION ALL SELECT k, w FROM b",
        "SELECT k, count(DISTINCT x) AS dx, count(*) AS n FROM base GROUP BY k",
    ),
    nested(
        "nested_over_window",
        "SELECT window_start, count(*) AS n FROM TUMBLE(a, t, INTERVAL '10' SECOND) GROUP BY window_start",
        "SELECT max(n) AS busiest, count(*) AS windows FROM base",
    ),
    nested(
        "nested_global_aggregate",
        "SELECT avg(v) AS m, count(*) AS n FROM a",
        "SELECT a.id, a.v FROM a, base WHERE a.v > base.m",
    ),
    nested(
        "nested_tumble",
        "SELECT id, t, v FROM a WHERE v > 5",
        "SELECT window_start, count(*) AS n, max(v) AS hi FROM TUMBLE(base, t, INTERVAL '10' SECOND) GROUP BY window_start",
    ),
    nested(
        "nested_join",
        "SELECT k, max(w) AS m FROM b GROUP BY k",
        "SELECT a.id, a.v, base.m FROM a JOIN base ON a.k = base.k WHERE a.v <= base.m",
    ),
];

/// Shapes where the projection is known to disagree with the ad hoc
/// answer, with why. The test requires them to still disagree, so a fix
/// makes it fail until the entry is removed.
pub const KNOWN_GAPS: &[(&str, &str)] = &[];
