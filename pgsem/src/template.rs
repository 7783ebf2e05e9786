//! The DataFusion session template every plan is made in: DataFusion's
//! defaults plus PostgreSQL's reading of literals, datafusion-pg-catalog's
//! functions and `pg_catalog` schema, this crate's functions, type planner,
//! analyzer rule and json operators. Built once; each session copies it.

use std::sync::Arc;

use datafusion::execution::{FunctionRegistry, SessionState, SessionStateBuilder};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;

use crate::PgsemError;

/// Builds the template from `config`, whose default catalog and schema are
/// the ones `pg_catalog` is registered in and names resolve in. The caller
/// owns the rest of `config` (information_schema, ...) and the catalogs;
/// `physical_rules` are appended to DataFusion's physical optimizer rules.
pub fn session_template(
    mut config: SessionConfig,
    physical_rules: impl IntoIterator<Item = Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> Result<SessionState, PgsemError> {
    // `1.5` is numeric in PostgreSQL, not float8.
    config.options_mut().sql_parser.parse_float_as_decimal = true;
    let catalog = config.options().catalog.default_catalog.clone();
    let ctx = SessionContext::new_with_config(config);
    datafusion_pg_catalog::setup_pg_catalog(&ctx, &catalog, EmptyContextProvider)
        .map_err(PgsemError::PgCatalogSetup)?;
    for udf in crate::functions() {
        ctx.register_udf(udf);
    }
    for udaf in crate::aggregate_functions() {
        ctx.register_udaf(udaf);
    }
    let mut builder = SessionStateBuilder::new_from_existing(ctx.state())
        .with_type_planner(Arc::new(crate::pg_types::WeirTypePlanner::default()));
    for rule in physical_rules {
        builder = builder.with_physical_optimizer_rule(rule);
    }
    crate::install(&mut builder);
    let mut template = builder.build();
    template.register_expr_planner(Arc::new(crate::JsonOperators))?;
    Ok(template)
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::DataType;

    use super::*;

    #[tokio::test]
    async fn plans_read_literals_and_functions_as_postgresql() {
        let config = SessionConfig::new().with_default_catalog_and_schema("weir", "public");
        let ctx = SessionContext::new_with_state(session_template(config, Vec::new()).unwrap());
        let plan = ctx
            .sql("SELECT 1.5 AS n, pg_typeof(1.5) AS t, current_database() AS d")
            .await
            .unwrap();
        let schema = plan.schema();
        assert_eq!(schema.field(0).data_type(), &DataType::Decimal128(2, 1));
        let batch = &plan.collect().await.unwrap()[0];
        let text = |i| {
            crate::text_output::value_text(batch.column(i).as_ref(), 0, batch.schema().field(i))
                .unwrap()
                .unwrap()
        };
        assert_eq!(text(1), "numeric");
        assert_eq!(text(2), "weir");
    }
}
