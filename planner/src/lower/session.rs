//! SESSION windows: the window node the `SESSION(...)` rewrite plans
//! ([`crate::session_window`]) becomes a [`SessionWindow`] operator, closing
//! sessions by the time column's watermark when it carries one.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr, Window, WindowFunctionDefinition};
use weir_engine::Input;
use weir_engine::ops::session_window::{SessionSpec, SessionWindow, gap_in_unit};

use super::Lowering;
use crate::PlanError;
use crate::session_window::SessionBound;

/// Lowers `window` if its functions are SESSION's bounds; `None` if not.
pub(super) fn session_window(
    lowering: &mut Lowering,
    window: &Window,
) -> Result<Option<Input>, PlanError> {
    let mut bounds = Vec::new();
    let mut functions = Vec::new();
    for expr in &window.window_expr {
        let Expr::WindowFunction(function) = expr.clone().unalias_nested().data else {
            return Ok(None);
        };
        let WindowFunctionDefinition::WindowUDF(udf) = &function.fun else {
            return Ok(None);
        };
        let Some(bound) = udf.inner().downcast_ref::<SessionBound>() else {
            return Ok(None);
        };
        bounds.push(bound.bound());
        functions.push(function);
    }
    let Some(first) = functions.first() else {
        return Ok(None);
    };
    let params = &first.params;
    if functions
        .iter()
        .any(|f| f.params.partition_by != params.partition_by || f.params.args != params.args)
    {
        return Err(PlanError::unsupported(
            "SESSION bounds over different partitions or times in one query node",
        ));
    }
    let input_schema = window.input.schema();
    // The gap is an integer literal (Int32 when it fits, as in PostgreSQL).
    let gap = |e: &Expr| match e {
        Expr::Literal(v, _) if v.data_type().is_integer() => match v.cast_to(&DataType::Int64) {
            Ok(ScalarValue::Int64(Some(micros))) => Some(micros),
            _ => None,
        },
        _ => None,
    };
    let (Some(time), Some(gap_micros)) = (
        params.args.first().and_then(|e| match e {
            Expr::Column(c) => Some(c),
            _ => None,
        }),
        params.args.get(1).and_then(gap),
    ) else {
        return Err(PlanError::unsupported(format!(
            "session_window_start/end other than through SESSION(relation, column, gap): \
             got ({})",
            super::display_list(&params.args)
        )));
    };
    let time_index = input_schema.index_of_column(time)?;
    let time_type = input_schema.field(time_index).data_type().clone();
    let gap = gap_in_unit(gap_micros, &time_type).ok_or_else(|| {
        PlanError::InvalidArgument(format!(
            "SESSION gap of {gap_micros} microseconds on {time} ({time_type}): \
             the time must be a TIMESTAMP whose unit holds the gap exactly"
        ))
    })?;

    let input = lowering.node(&window.input)?;
    let partition_by = params
        .partition_by
        .iter()
        .map(|e| lowering.physical(e, input_schema))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = SessionSpec {
        input_schema: Arc::new(input_schema.as_arrow().clone()),
        partition_by,
        time: time_index,
        gap,
        bounds,
        output_schema: SchemaRef::new(window.schema.as_arrow().clone()),
    };
    let closes = lowering
        .graph
        .watermark_columns(input)
        .contains(&time_index);
    let build = || -> Result<SessionWindow, PlanError> {
        let operator = SessionWindow::new(spec.clone())?;
        Ok(if closes { operator.closing() } else { operator })
    };
    let (operator, workers) = lowering.keyed(Box::new(build()?), || Ok(Box::new(build()?)))?;
    let closing = if closes {
        format!(" [a session's rows dropped when the watermark of {time} passes its end]")
    } else {
        String::new()
    };
    let description = format!(
        "session window: gap INTERVAL '{}' by [{}] over {time}{closing}{workers}",
        crate::window_tvf::interval_string(gap_micros),
        super::display_list(&params.partition_by),
    );
    let at = lowering.add(operator, vec![input], description)?;
    if !closes {
        lowering.unbounded_if_growing(at, &[input]);
    }
    Ok(Some(at))
}
