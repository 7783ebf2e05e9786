//! The `TUMBLE`, `HOP` and `SESSION` window table functions, rewritten in
//! the AST into plain derived tables before DataFusion binds the statement:
//!
//! ```sql
//! TUMBLE(rel, col, size)        -- one row per row of rel, in its window
//! HOP(rel, col, slide, size)    -- size/slide rows per row of rel
//! SESSION(rel, col, gap [, key ...])  -- one row per row, in its session
//! ```
//!
//! SESSION's windows depend on other rows, so it is not a column
//! expression: it becomes two window functions ([`crate::session_window`]).
//!
//! Each becomes `(SELECT *, <start> AS window_start, <end> AS window_end
//! FROM rel WHERE col IS NOT NULL) AS <alias>`, one `UNION ALL` branch per
//! window a row falls in. Doing it on the AST keeps one rewrite for ad-hoc
//! queries and projections, and leaves DataFusion to resolve `rel` (table,
//! projection or CTE) and to type-check `col`.
//!
//! Sizes and slides must be literals with a fixed length (no months or
//! years): HOP needs `size / slide` to know how many branches to write, and
//! the emitted constants are whole microseconds to hours, never days, so
//! `+ size` cannot stretch across a daylight-saving change.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, DataType, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, GroupByExpr, Ident, Interval as SqlInterval, ObjectName, Query, Select,
    SelectFlavor, SelectItem, SetExpr, SetOperator, SetQuantifier, Statement, TableAlias,
    TableFactor, TableWithJoins, Value, VisitMut, VisitorMut, WildcardAdditionalOptions,
};

use crate::error::PlanError;
use weir_pgsem::parse_interval;

/// Most windows HOP may put one row in; each is a branch of the rewritten
/// query, so this bounds the plan's size.
pub const MAX_HOP_WINDOWS: i64 = 100;

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Replaces every `TUMBLE(...)` and `HOP(...)` in a FROM clause anywhere in
/// `statement` (joins, subqueries, CTEs, INSERT ... SELECT) with its derived
/// table. Statements without them are left untouched.
pub fn rewrite_window_tvfs(statement: &mut Statement) -> Result<(), PlanError> {
    match statement.visit(&mut WindowTvfs) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(e) => Err(*e),
    }
}

struct WindowTvfs;

impl VisitorMut for WindowTvfs {
    // Boxed: the visitor returns it up through every level of recursion.
    type Break = Box<PlanError>;

    // After the children: the derived table put in place is then not
    // visited again.
    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<Self::Break> {
        match rewrite_factor(factor) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(Box::new(e)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tumble,
    Hop,
    Session,
}

impl Kind {
    fn of(name: &ObjectName) -> Option<Self> {
        let [part] = name.0.as_slice() else {
            return None;
        };
        let ident = part.as_ident()?;
        if ident.value.eq_ignore_ascii_case("tumble") {
            Some(Self::Tumble)
        } else if ident.value.eq_ignore_ascii_case("hop") {
            Some(Self::Hop)
        } else if ident.value.eq_ignore_ascii_case("session") {
            Some(Self::Session)
        } else {
            None
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Tumble => "TUMBLE",
            Self::Hop => "HOP",
            Self::Session => "SESSION",
        }
    }

    fn usage(self) -> &'static str {
        match self {
            Self::Tumble => "TUMBLE expects (relation, time column, size interval)",
            Self::Hop => "HOP expects (relation, time column, slide interval, size interval)",
            Self::Session => {
                "SESSION expects (relation, time column, gap interval[, partition column ...])"
            }
        }
    }
}

/// A checked call: windows of `size` starting every `slide` (equal for
/// TUMBLE), both in microseconds.
pub(crate) struct WindowCall {
    pub(crate) relation: ObjectName,
    pub(crate) column: Ident,
    /// SESSION's gap.
    slide: i64,
    size: i64,
    /// SESSION's partition columns (none for the others).
    pub(crate) partition: Vec<Ident>,
}

impl WindowCall {
    /// SESSION's gap in microseconds.
    pub(crate) fn gap(&self) -> i64 {
        self.size
    }
}

fn rewrite_factor(factor: &mut TableFactor) -> Result<(), PlanError> {
    let TableFactor::Table {
        name,
        alias,
        args: Some(args),
        with_ordinality,
        sample,
        ..
    } = factor
    else {
        return Ok(());
    };
    let Some(kind) = Kind::of(name) else {
        return Ok(());
    };
    if *with_ordinality {
        return Err(PlanError::unsupported(format!(
            "{} ... WITH ORDINALITY",
            kind.name()
        )));
    }
    let call = check_call(kind, &args.args)?;
    // Without an alias the window's rows still answer to the relation's
    // name (`HOP(bid, ...)` is read as `bid.auction`), as in RisingWave.
    let alias = alias.take().unwrap_or_else(|| TableAlias {
        explicit: true,
        name: call
            .relation
            .0
            .last()
            .and_then(|part| part.as_ident())
            .cloned()
            .unwrap_or_else(|| Ident::new(kind.name().to_ascii_lowercase())),
        columns: vec![],
        at: None,
    });
    *factor = TableFactor::Derived {
        lateral: false,
        subquery: Box::new(match kind {
            Kind::Session => crate::session_window::query(&call)?,
            Kind::Tumble | Kind::Hop => windows_query(&call),
        }),
        alias: Some(alias),
        sample: sample.take(),
    };
    Ok(())
}

fn check_call(kind: Kind, args: &[FunctionArg]) -> Result<WindowCall, PlanError> {
    let bad = |detail: String| PlanError::InvalidArgument(format!("{}: {detail}", kind.usage()));
    let exprs = args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
            other => Err(bad(format!("got {other}"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let arity_fits = match kind {
        Kind::Tumble => exprs.len() == 3,
        Kind::Hop => exprs.len() == 4,
        Kind::Session => exprs.len() >= 3,
    };
    if !arity_fits {
        return Err(bad(format!("got {} arguments", exprs.len())));
    }
    let relation = match exprs[0] {
        Expr::Identifier(ident) => ObjectName::from(vec![ident.clone()]),
        Expr::CompoundIdentifier(idents) => ObjectName::from(idents.clone()),
        other => {
            return Err(bad(format!(
                "the relation must be a table or projection name, not {other}"
            )));
        }
    };
    let Expr::Identifier(column) = exprs[1] else {
        return Err(bad(format!(
            "the time column must be a column name of {relation}, not {}",
            exprs[1]
        )));
    };
    let interval = |role: &str, e: &Expr| fixed_interval(kind, role, e);
    let (slide, size) = match kind {
        Kind::Tumble | Kind::Session => {
            let role = if kind == Kind::Session { "gap" } else { "size" };
            let size = interval(role, exprs[2])?;
            (size, size)
        }
        Kind::Hop => {
            let slide = interval("slide", exprs[2])?;
            let size = interval("size", exprs[3])?;
            check_hop(exprs[2], slide, exprs[3], size)?;
            (slide, size)
        }
    };
    let partition = exprs[3..]
        .iter()
        .filter(|_| kind == Kind::Session)
        .map(|e| match e {
            Expr::Identifier(ident) => Ok(ident.clone()),
            other => Err(bad(format!(
                "a partition column must be a column name of {relation}, not {other}"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(WindowCall {
        relation,
        column: column.clone(),
        slide,
        size,
        partition,
    })
}

/// HOP writes one branch per window a row is in, so the windows must tile
/// whole slides and be few.
fn check_hop(slide_expr: &Expr, slide: i64, size_expr: &Expr, size: i64) -> Result<(), PlanError> {
    if size % slide != 0 {
        let below = size / slide * slide;
        let above = below + slide;
        let sizes = if below > 0 {
            format!("{} or {}", render(below), render(above))
        } else {
            render(above)
        };
        return Err(PlanError::InvalidArgument(format!(
            "HOP size {size_expr} is not a whole multiple of slide {slide_expr}: \
             use a size such as {sizes}, or a slide that divides the size"
        )));
    }
    let windows = size / slide;
    if windows > MAX_HOP_WINDOWS {
        let min_slide = (size + MAX_HOP_WINDOWS - 1) / MAX_HOP_WINDOWS;
        return Err(PlanError::InvalidArgument(format!(
            "HOP size {size_expr} over slide {slide_expr} puts each row in {windows} windows, \
             at most {MAX_HOP_WINDOWS} are allowed: use a slide of at least {} that divides \
             the size",
            render(min_slide)
        )));
    }
    Ok(())
}

/// The length of an interval literal in microseconds; must be positive and
/// fixed (a month has no fixed length).
fn fixed_interval(kind: Kind, role: &str, expr: &Expr) -> Result<i64, PlanError> {
    let name = kind.name();
    let text = interval_text(expr).ok_or_else(|| {
        PlanError::InvalidArgument(format!(
            "{}: the {role} must be an interval literal such as INTERVAL '10 seconds', not {expr}",
            kind.usage()
        ))
    })?;
    let value = parse_interval(&text)
        .map_err(|e| PlanError::InvalidArgument(format!("{name} {role} {expr}: {e}")))?;
    if value.months != 0 {
        return Err(PlanError::unsupported(format!(
            "a {name} {role} of {expr} (months and years vary in length; use days or smaller units)"
        )));
    }
    let micros = i64::from(value.days)
        .checked_mul(MICROS_PER_DAY)
        .and_then(|d| d.checked_add(value.micros))
        .ok_or_else(|| PlanError::InvalidArgument(format!("{name} {role} {expr} is too large")))?;
    if micros <= 0 {
        return Err(PlanError::InvalidArgument(format!(
            "{name} {role} must be positive, got {expr}"
        )));
    }
    Ok(micros)
}

/// The PostgreSQL interval text of `INTERVAL '10' SECOND`,
/// `INTERVAL '10 seconds'` or `'10 seconds'::interval`.
fn interval_text(expr: &Expr) -> Option<String> {
    let literal = |e: &Expr| match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.to_string()),
            _ => None,
        },
        _ => None,
    };
    match expr {
        Expr::Interval(SqlInterval {
            value,
            leading_field,
            last_field: None,
            ..
        }) => {
            let text = literal(value)?;
            Some(match leading_field {
                Some(unit) => format!("{text} {unit}"),
                None => text,
            })
        }
        Expr::Cast {
            expr,
            data_type: DataType::Interval { fields: None, .. },
            ..
        } => literal(expr),
        Expr::Nested(inner) => interval_text(inner),
        _ => None,
    }
}

/// One `SELECT` per window a row can fall in, joined by `UNION ALL`.
/// Branch `i` holds the window starting `i` slides before the slide the row
/// is in; all `size / slide` of them contain the row.
fn windows_query(call: &WindowCall) -> Query {
    let windows = call.size / call.slide;
    let body = (0..windows)
        .map(|i| SetExpr::Select(Box::new(branch(call, i * call.slide))))
        .reduce(|left, right| SetExpr::SetOperation {
            op: SetOperator::Union,
            set_quantifier: SetQuantifier::All,
            left: Box::new(left),
            right: Box::new(right),
        })
        .expect("a window holds at least one slide");
    plain_query(body)
}

/// `SELECT *, bin - back AS window_start, bin + (size - back) AS window_end
/// FROM rel WHERE col IS NOT NULL`, where bin is the slide-aligned start of
/// the slide holding `col`.
fn branch(call: &WindowCall, back: i64) -> Select {
    let column = Expr::Identifier(call.column.clone());
    let bin = Expr::Function(function(
        "date_bin",
        vec![interval_literal(call.slide), column.clone()],
    ));
    let start = if back == 0 {
        bin.clone()
    } else {
        binary(bin.clone(), BinaryOperator::Minus, interval_literal(back))
    };
    let end = binary(
        bin,
        BinaryOperator::Plus,
        interval_literal(call.size - back),
    );
    let projection = vec![
        SelectItem::Wildcard(WildcardAdditionalOptions::default()),
        SelectItem::ExprWithAlias {
            expr: start,
            alias: Ident::new("window_start"),
        },
        SelectItem::ExprWithAlias {
            expr: end,
            alias: Ident::new("window_end"),
        },
    ];
    let from = TableWithJoins {
        relation: TableFactor::Table {
            name: call.relation.clone(),
            alias: None,
            args: None,
            with_hints: vec![],
            version: None,
            with_ordinality: false,
            partitions: vec![],
            json_path: None,
            sample: None,
            index_hints: vec![],
        },
        joins: vec![],
    };
    select(projection, from, Expr::IsNotNull(Box::new(column)))
}

fn binary(left: Expr, op: BinaryOperator, right: Expr) -> Expr {
    Expr::BinaryOp {
        left: Box::new(left),
        op,
        right: Box::new(right),
    }
}

/// `INTERVAL '<n> <unit>'` in the largest unit up to hours that divides
/// `micros` exactly.
fn interval_literal(micros: i64) -> Expr {
    Expr::Interval(SqlInterval {
        value: Box::new(Expr::Value(
            Value::SingleQuotedString(interval_string(micros)).with_empty_span(),
        )),
        leading_field: None,
        leading_precision: None,
        last_field: None,
        fractional_seconds_precision: None,
    })
}

pub(crate) fn interval_string(micros: i64) -> String {
    const UNITS: [(i64, &str); 5] = [
        (3_600_000_000, "hour"),
        (60_000_000, "minute"),
        (1_000_000, "second"),
        (1_000, "millisecond"),
        (1, "microsecond"),
    ];
    let (per, unit) = UNITS
        .into_iter()
        .find(|(per, _)| micros % per == 0)
        .expect("every whole number of microseconds divides by 1");
    let n = micros / per;
    let plural = if n == 1 { "" } else { "s" };
    format!("{n} {unit}{plural}")
}

/// An interval for error messages, as INTERVAL '...'.
fn render(micros: i64) -> String {
    format!("INTERVAL '{}'", interval_string(micros))
}

/// A plain call `name(args...)` in the AST.
pub(crate) fn function(name: &str, args: Vec<Expr>) -> Function {
    Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    }
}

fn select(projection: Vec<SelectItem>, from: TableWithJoins, selection: Expr) -> Select {
    Select {
        select_token: AttachedToken::empty(),
        optimizer_hints: vec![],
        distinct: None,
        select_modifiers: None,
        top: None,
        top_before_distinct: false,
        projection,
        exclude: None,
        into: None,
        from: vec![from],
        lateral_views: vec![],
        prewhere: None,
        selection: Some(selection),
        connect_by: vec![],
        group_by: GroupByExpr::Expressions(vec![], vec![]),
        cluster_by: vec![],
        distribute_by: vec![],
        sort_by: vec![],
        having: None,
        named_window: vec![],
        qualify: None,
        window_before_qualify: false,
        value_table_mode: None,
        flavor: SelectFlavor::Standard,
    }
}

/// A query of `body` alone: no WITH, ORDER BY, LIMIT or other clauses.
pub fn plain_query(body: SetExpr) -> Query {
    Query {
        with: None,
        body: Box::new(body),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: vec![],
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_sql;

    fn rewritten(sql: &str) -> Result<String, PlanError> {
        let mut statements = parse_sql(sql).expect("test SQL parses");
        assert_eq!(statements.len(), 1);
        rewrite_window_tvfs(&mut statements[0])?;
        Ok(statements[0].to_string())
    }

    fn rewrites(sql: &str) -> String {
        rewritten(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn invalid(sql: &str) -> String {
        match rewritten(sql) {
            Err(PlanError::InvalidArgument(m)) => m,
            other => panic!("{sql}: expected InvalidArgument, got {other:?}"),
        }
    }

    const TUMBLE_10S: &str = "(SELECT *, date_bin(INTERVAL '10 seconds', date_time) AS window_start, \
        date_bin(INTERVAL '10 seconds', date_time) + INTERVAL '10 seconds' AS window_end \
        FROM bids WHERE date_time IS NOT NULL)";

    #[test]
    fn tumble_becomes_a_derived_table_named_after_its_relation() {
        assert_eq!(
            rewrites(
                "SELECT window_start, count(*) FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND) GROUP BY 1"
            ),
            format!("SELECT window_start, count(*) FROM {TUMBLE_10S} AS bids GROUP BY 1")
        );
    }

    #[test]
    fn tumble_keeps_the_alias_and_reads_every_interval_spelling() {
        for size in [
            "INTERVAL '10' SECOND",
            "INTERVAL '10 seconds'",
            "INTERVAL '10 SECONDS'",
            "'10 seconds'::interval",
            "INTERVAL '10000 milliseconds'",
        ] {
            for (alias, shown) in [("AS t", "AS t"), ("t", "t")] {
                assert_eq!(
                    rewrites(&format!(
                        "SELECT t.price FROM tumble(bids, date_time, {size}) {alias}"
                    )),
                    format!("SELECT t.price FROM {TUMBLE_10S} {shown}"),
                    "size {size}, alias {alias}"
                );
            }
        }
    }

    #[test]
    fn sizes_are_written_in_the_largest_exact_unit_below_days() {
        for (size, shown) in [
            ("INTERVAL '1 minute 30 seconds'", "90 seconds"),
            ("INTERVAL '2' HOUR", "2 hours"),
            ("INTERVAL '1 day'", "24 hours"),
            ("INTERVAL '1 minute'", "1 minute"),
            ("INTERVAL '1.5 seconds'", "1500 milliseconds"),
            ("INTERVAL '7 microseconds'", "7 microseconds"),
        ] {
            let sql = rewrites(&format!("SELECT * FROM TUMBLE(s.bids, ts, {size})"));
            assert!(
                sql.contains(&format!("+ INTERVAL '{shown}' AS window_end FROM s.bids ")),
                "{size}: {sql}"
            );
        }
    }

    #[test]
    fn hop_is_one_union_branch_per_window_holding_the_row() {
        assert_eq!(
            rewrites(
                "SELECT * FROM HOP(bids, date_time, INTERVAL '2' SECOND, INTERVAL '6' SECOND) AS h"
            ),
            "SELECT * FROM (\
             SELECT *, date_bin(INTERVAL '2 seconds', date_time) AS window_start, \
             date_bin(INTERVAL '2 seconds', date_time) + INTERVAL '6 seconds' AS window_end \
             FROM bids WHERE date_time IS NOT NULL \
             UNION ALL \
             SELECT *, date_bin(INTERVAL '2 seconds', date_time) - INTERVAL '2 seconds' AS window_start, \
             date_bin(INTERVAL '2 seconds', date_time) + INTERVAL '4 seconds' AS window_end \
             FROM bids WHERE date_time IS NOT NULL \
             UNION ALL \
             SELECT *, date_bin(INTERVAL '2 seconds', date_time) - INTERVAL '4 seconds' AS window_start, \
             date_bin(INTERVAL '2 seconds', date_time) + INTERVAL '2 seconds' AS window_end \
             FROM bids WHERE date_time IS NOT NULL) AS h"
        );
    }

    #[test]
    fn hop_with_slide_equal_to_size_is_a_tumble() {
        assert_eq!(
            rewrites(
                "SELECT * FROM hop(bids, date_time, INTERVAL '10 seconds', INTERVAL '10 seconds')"
            ),
            format!("SELECT * FROM {TUMBLE_10S} AS bids")
        );
    }

    #[test]
    fn calls_are_found_wherever_a_table_can_be() {
        let call = "TUMBLE(bids, date_time, INTERVAL '10' SECOND)";
        for sql in [
            format!("SELECT * FROM (SELECT * FROM {call}) AS sub"),
            format!("SELECT * FROM people JOIN {call} AS w ON w.bidder = people.id"),
            format!("WITH w AS (SELECT * FROM {call}) SELECT * FROM w"),
            format!("SELECT * FROM people WHERE id IN (SELECT bidder FROM {call})"),
            format!("INSERT INTO counts SELECT window_start, count(*) FROM {call} GROUP BY 1"),
            format!("CREATE TABLE counts AS SELECT * FROM {call}"),
            format!("CREATE VIEW v AS SELECT * FROM {call}"),
            format!("EXPLAIN SELECT * FROM {call}"),
            format!("SELECT * FROM {call} AS a, {call} AS b"),
        ] {
            let out = rewrites(&sql);
            assert!(out.contains(TUMBLE_10S), "{sql} -> {out}");
            assert!(
                !out.to_ascii_uppercase().contains("TUMBLE("),
                "{sql} -> {out}"
            );
        }
    }

    #[test]
    fn quoted_and_qualified_names_survive() {
        let out = rewrites(r#"SELECT * FROM TUMBLE(public."Bids", "Time", INTERVAL '1 hour')"#);
        assert_eq!(
            out,
            "SELECT * FROM (SELECT *, date_bin(INTERVAL '1 hour', \"Time\") AS window_start, \
             date_bin(INTERVAL '1 hour', \"Time\") + INTERVAL '1 hour' AS window_end \
             FROM public.\"Bids\" WHERE \"Time\" IS NOT NULL) AS \"Bids\""
        );
    }

    #[test]
    fn other_tables_and_functions_are_left_alone() {
        for sql in [
            "SELECT * FROM tumble",
            "SELECT * FROM generate_series(1, 3)",
            "SELECT tumble FROM hop WHERE x = 1",
        ] {
            assert_eq!(rewrites(sql), sql);
        }
    }

    #[test]
    fn malformed_calls_say_what_is_expected() {
        let m = invalid("SELECT * FROM TUMBLE(bids, date_time)");
        assert_eq!(
            m,
            "TUMBLE expects (relation, time column, size interval): got 2 arguments"
        );
        let m = invalid("SELECT * FROM HOP(bids, date_time, INTERVAL '1' SECOND)");
        assert!(
            m.starts_with("HOP expects (relation, time column, slide interval, size interval)"),
            "{m}"
        );
        let m = invalid("SELECT * FROM TUMBLE('bids', date_time, INTERVAL '1' SECOND)");
        assert!(
            m.contains("the relation must be a table or projection name, not 'bids'"),
            "{m}"
        );
        let m = invalid(
            "SELECT * FROM TUMBLE(bids, date_time + INTERVAL '1' SECOND, INTERVAL '1' SECOND)",
        );
        assert!(
            m.contains("the time column must be a column name of bids"),
            "{m}"
        );
        let m = invalid("SELECT * FROM TUMBLE(bids, bids.date_time, INTERVAL '1' SECOND)");
        assert!(m.contains("the time column must be a column name"), "{m}");
        let m = invalid("SELECT * FROM TUMBLE(bids, date_time, 10)");
        assert!(
            m.contains(
                "the size must be an interval literal such as INTERVAL '10 seconds', not 10"
            ),
            "{m}"
        );
        let m = invalid("SELECT * FROM TUMBLE(bids, date_time, $1)");
        assert!(m.contains("the size must be an interval literal"), "{m}");
        let m = invalid("SELECT * FROM TUMBLE(bids, date_time, INTERVAL 'soon')");
        assert!(
            m.starts_with("TUMBLE size INTERVAL 'soon': invalid input syntax for type interval"),
            "{m}"
        );
        let m = invalid("SELECT * FROM TUMBLE(bids, date_time, INTERVAL '0 seconds')");
        assert_eq!(m, "TUMBLE size must be positive, got INTERVAL '0 seconds'");
        let m = invalid(
            "SELECT * FROM HOP(bids, date_time, INTERVAL '-1 second', INTERVAL '1 minute')",
        );
        assert_eq!(m, "HOP slide must be positive, got INTERVAL '-1 second'");
        let m = invalid("SELECT * FROM TUMBLE(bids, date_time, size => INTERVAL '1' SECOND)");
        assert!(m.contains("got size => INTERVAL '1' SECOND"), "{m}");
    }

    #[test]
    fn hop_size_must_be_a_whole_number_of_slides() {
        let m = invalid("SELECT * FROM HOP(bids, t, INTERVAL '3' SECOND, INTERVAL '10' SECOND)");
        assert_eq!(
            m,
            "HOP size INTERVAL '10' SECOND is not a whole multiple of slide INTERVAL '3' SECOND: \
             use a size such as INTERVAL '9 seconds' or INTERVAL '12 seconds', or a slide that \
             divides the size"
        );
        let m = invalid("SELECT * FROM HOP(bids, t, INTERVAL '1 minute', INTERVAL '10 seconds')");
        assert!(
            m.contains("use a size such as INTERVAL '1 minute', or"),
            "{m}"
        );
    }

    #[test]
    fn hop_is_capped_at_a_hundred_windows_per_row() {
        let out =
            rewrites("SELECT * FROM HOP(bids, t, INTERVAL '1 second', INTERVAL '100 seconds')");
        assert_eq!(out.matches("UNION ALL").count(), 99);
        let m = invalid("SELECT * FROM HOP(bids, t, INTERVAL '1 second', INTERVAL '1 hour')");
        assert_eq!(
            m,
            "HOP size INTERVAL '1 hour' over slide INTERVAL '1 second' puts each row in 3600 \
             windows, at most 100 are allowed: use a slide of at least INTERVAL '36 seconds' \
             that divides the size"
        );
    }

    #[test]
    fn months_and_years_are_unsupported() {
        for size in [
            "INTERVAL '1 month'",
            "INTERVAL '1' YEAR",
            "INTERVAL '1 year 2 days'",
        ] {
            let sql = format!("SELECT * FROM TUMBLE(bids, t, {size})");
            match rewritten(&sql) {
                Err(PlanError::Unsupported(m)) => assert!(
                    m.starts_with(&format!("a TUMBLE size of {size} (months and years vary")),
                    "{m}"
                ),
                other => panic!("{sql}: {other:?}"),
            }
        }
    }

    #[test]
    fn with_ordinality_is_unsupported() {
        let sql = "SELECT * FROM TUMBLE(bids, t, INTERVAL '1' SECOND) WITH ORDINALITY";
        assert!(matches!(rewritten(sql), Err(PlanError::Unsupported(_))));
    }
}
