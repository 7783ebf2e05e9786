//! The statements a session may run while the database recovers.

use datafusion::sql::sqlparser::ast::Statement;

/// What a session may run before the database is ready
/// ([`crate::recovery`]): nothing that reads or changes tables or
/// projections, so no commit reaches projections before the replay.
pub(super) fn available_while_recovering(statement: &Statement) -> bool {
    match statement {
        Statement::Query(_) => weir_planner::compat::reads_only_system(statement),
        Statement::Set(_)
        | Statement::ShowVariable { .. }
        | Statement::ShowVariables { .. }
        | Statement::Discard { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{Statement, available_while_recovering};

    fn parse(sql: &str) -> Statement {
        weir_planner::parse_sql(sql).unwrap().remove(0)
    }

    #[test]
    fn only_system_reads_and_settings_run_while_recovering() {
        for allowed in [
            "SELECT weir_wait_ready('10s')",
            "SELECT 1",
            "SELECT * FROM weir_catalog.backends",
            "SELECT relname FROM pg_catalog.pg_class",
            "SELECT count(*) FROM information_schema.tables",
            "SET application_name = 'x'",
            "SHOW TimeZone",
        ] {
            assert!(available_while_recovering(&parse(allowed)), "{allowed}");
        }
        for refused in [
            "SELECT * FROM my_projection",
            "SELECT 1 FROM pg_catalog.pg_class JOIN t ON true",
            "SELECT (SELECT count(*) FROM t)",
            "INSERT INTO t VALUES (1)",
            "CREATE PROJECTION p AS SELECT 1",
            "FLUSH",
            "COPY t FROM STDIN",
        ] {
            assert!(!available_while_recovering(&parse(refused)), "{refused}");
        }
    }
}
