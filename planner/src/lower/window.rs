//! Top-N per partition: `WHERE rn <= n` over `ROW_NUMBER()` or `RANK()`.
//!
//! The only window functions a projection maintains are these two, and only
//! under a filter that bounds the number: the top-N operator then keeps `n`
//! rows per partition. The whole filter is still applied after the numbering,
//! so `rn = 3` or extra conditions keep their meaning.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Filter, LogicalPlan, Operator};
use datafusion::physical_expr::create_physical_sort_exprs;
use datafusion::physical_expr::expressions::CastExpr;
use weir_engine::Input;
use weir_engine::ops::map::Map;
use weir_engine::ops::top_n::{Numbering, TopN, TopNSpec};

use super::{Lowering, column, identity};
use crate::PlanError;

/// Lowers `filter` if it is a top-N over a window; `None` if it is not.
pub(super) fn top_n_filter(
    lowering: &mut Lowering,
    filter: &Filter,
) -> Result<Option<Input>, PlanError> {
    let (window, projection) = match filter.input.as_ref() {
        LogicalPlan::Window(w) => (w, None),
        LogicalPlan::Projection(p) => match p.input.as_ref() {
            LogicalPlan::Window(w) => (w, Some(p)),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let [window_expr] = window.window_expr.as_slice() else {
        return Ok(None);
    };
    let Expr::WindowFunction(function) = window_expr.clone().unalias_nested().data else {
        return Ok(None);
    };
    let numbering = match function.fun.name() {
        "row_number" => Numbering::RowNumber,
        "rank" => Numbering::Rank,
        _ => return Ok(None),
    };
    // The number column as the filter sees it.
    let width = window.schema.fields().len();
    let number = Column::from(window.schema.qualified_field(width - 1));
    let number = match projection {
        None => number,
        Some(p) => {
            let Some(i) = p.expr.iter().position(
                |e| matches!(e.clone().unalias_nested().data, Expr::Column(c) if c == number),
            ) else {
                return Ok(None);
            };
            Column::from(p.schema.qualified_field(i))
        }
    };
    let Some(limit) = split_conjunction(&filter.predicate)
        .into_iter()
        .filter_map(|c| upper_bound(c, &number))
        .min()
    else {
        return Ok(None);
    };

    let input = lowering.node(&window.input)?;
    let input_schema = window.input.schema();
    let partition_by = function
        .params
        .partition_by
        .iter()
        .map(|e| lowering.physical(e, input_schema))
        .collect::<Result<Vec<_>, _>>()?;
    let order_by = create_physical_sort_exprs(
        &function.params.order_by,
        input_schema,
        &lowering.props,
        &lowering.planning,
    )?
    .into_iter()
    .map(|s| (s.expr, s.options))
    .collect();
    let input_arrow: SchemaRef = Arc::new(input_schema.as_arrow().clone());
    let window_arrow: SchemaRef = Arc::new(window.schema.as_arrow().clone());
    let number_field = window_arrow.field(width - 1);
    let mut fields: Vec<Field> = input_arrow
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(number_field.name(), DataType::Int64, false));
    let numbered: SchemaRef = Arc::new(Schema::new(fields));
    let spec = TopNSpec {
        input_schema: input_arrow,
        partition_by,
        order_by,
        offset: 0,
        limit: limit.max(0) as usize,
        numbering,
        output_schema: numbered.clone(),
    };
    let append_only = lowering.append_only(input);
    let watermarked = lowering.graph.watermark_columns(input);
    let emit_on_close = lowering.emit_on_window_close;
    let build = || -> Result<TopN, PlanError> {
        let operator = TopN::new(spec.clone())?;
        // PARTITION BY window_start: a partition closes with its window.
        let operator = match operator.window_key(&watermarked) {
            Some(key) => operator.closing_by(key, emit_on_close),
            None => operator,
        };
        Ok(if append_only {
            operator.over_append_only()
        } else {
            operator
        })
    };
    let operator = build()?;
    let retention = operator.retention();
    let window_key = operator.window_key(&watermarked);
    let closes = window_key.map(|key| {
        let column = function.params.partition_by[key].human_display();
        if emit_on_close {
            format!(" [emits each partition's rows once, when the watermark of {column} passes it]")
        } else {
            format!(" [a partition's state dropped when the watermark of {column} passes it]")
        }
    });
    let (operator, workers) = lowering.keyed(Box::new(operator), || Ok(Box::new(build()?)))?;
    let description = format!(
        "top-n: {}() over (partition by [{}] order by [{}]) <= {limit} [keeps {retention}]{}{workers}",
        function.fun.name(),
        super::display_list(&function.params.partition_by),
        function
            .params
            .order_by
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        closes.clone().unwrap_or_default(),
    );
    let mut at = lowering.add(operator, vec![input], description)?;
    if let (Some(_), true, Input::Node(i)) = (window_key, emit_on_close, at) {
        // Each partition's rows once, never retracted.
        lowering.emitted_on_close = true;
        lowering.appends[i] = true;
    }
    // A partition per key keeps its window (or, over updates, every row).
    if closes.is_none() && (!function.params.partition_by.is_empty() || !append_only) {
        lowering.unbounded_if_growing(at, &[input]);
    }
    // The operator numbers with Int64; the plan's column type wins.
    let mut columns = identity(&numbered);
    let last = columns.pop().expect("the number column");
    columns.push(Arc::new(CastExpr::new(
        last,
        number_field.data_type().clone(),
        None,
    )));
    at = lowering.add(
        Box::new(Map::new(
            numbered.clone(),
            None,
            columns,
            window_arrow.clone(),
        )),
        vec![at],
        format!("map: number as {}", number_field.data_type()),
    )?;
    if let Some(p) = projection {
        let exprs = p
            .expr
            .iter()
            .map(|e| lowering.physical(e, &window.schema))
            .collect::<Result<Vec<_>, _>>()?;
        let schema: SchemaRef = Arc::new(p.schema.as_arrow().clone());
        at = lowering.add(
            Box::new(Map::new(window_arrow.clone(), None, exprs, schema)),
            vec![at],
            format!("map: {}", super::display_list(&p.expr)),
        )?;
    }
    let predicate = lowering.physical(&filter.predicate, filter.input.schema())?;
    let schema: SchemaRef = Arc::new(filter.input.schema().as_arrow().clone());
    let columns = (0..schema.fields().len())
        .map(|i| column(&schema, i))
        .collect();
    let at = lowering.add(
        Box::new(Map::new(schema.clone(), Some(predicate), columns, schema)),
        vec![at],
        format!("filter: {}", filter.predicate.human_display()),
    )?;
    Ok(Some(at))
}

/// The largest number `conjunct` lets through, if it bounds `number`.
fn upper_bound(conjunct: &Expr, number: &Column) -> Option<i64> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else {
        return None;
    };
    let (op, value) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), value) if c == number => (*op, value),
        (value, Expr::Column(c)) if c == number => (op.swap()?, value),
        _ => return None,
    };
    let n = match value.clone().unalias_nested().data {
        Expr::Literal(v, _) => integer(&v)?,
        Expr::Cast(c) => match c.expr.as_ref() {
            Expr::Literal(v, _) => integer(v)?,
            _ => return None,
        },
        _ => return None,
    };
    match op {
        Operator::LtEq | Operator::Eq => Some(n),
        Operator::Lt => Some(n - 1),
        _ => None,
    }
}

fn integer(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::Int8(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int64(Some(v)) => Some(*v),
        ScalarValue::UInt8(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt64(Some(v)) => i64::try_from(*v).ok(),
        _ => None,
    }
}
