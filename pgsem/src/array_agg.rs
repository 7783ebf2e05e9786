//! `array_agg` whose result keeps its argument's PostgreSQL type.
//!
//! In PostgreSQL `array_agg(x)` is an array of `x`'s type: `oid[]` for a
//! catalog `oid` column, `varchar[]` for a `varchar` one. DataFusion's
//! `array_agg` builds its list item field from the argument's Arrow type
//! alone, dropping the field metadata that carries those types (see
//! `crate::types`), so `array_agg(atttypid)` would go out as `int4[]`.
//! asyncpg's type introspection aggregates `atttypid` and must get `oid[]`,
//! the one array type it decodes before introspecting.
//!
//! [`TypedArrayAgg`] wraps DataFusion's function: when the argument field has
//! metadata, the result's item field is the argument's field, and finished
//! lists are relabelled with it (the values are not copied). Intermediate
//! state keeps DataFusion's own types, so partial aggregation is unchanged;
//! with an untagged argument nothing differs from DataFusion's `array_agg`.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, ListArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, SetMonotonicity, Signature,
};

/// The `array_agg` to register in place of DataFusion's.
pub fn udaf() -> AggregateUDF {
    let inner = datafusion::functions_aggregate::array_agg::array_agg_udaf();
    AggregateUDF::new_from_impl(TypedArrayAgg {
        inner: inner.as_ref().clone(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TypedArrayAgg {
    inner: AggregateUDF,
}

impl TypedArrayAgg {
    fn wrap(inner: Arc<dyn AggregateUDFImpl>) -> Arc<dyn AggregateUDFImpl> {
        Arc::new(Self {
            inner: AggregateUDF::new_from_shared_impl(inner),
        })
    }

    fn imp(&self) -> &Arc<dyn AggregateUDFImpl> {
        self.inner.inner()
    }
}

/// The list item field of a result, when it differs from what DataFusion's
/// accumulators produce (that is, when it carries metadata).
fn tagged_item(return_field: &Field) -> Option<FieldRef> {
    match return_field.data_type() {
        DataType::List(item) if !item.metadata().is_empty() => Some(Arc::clone(item)),
        _ => None,
    }
}

/// `array` (a list) with `item` as its item field; same buffers.
/// `inner`, relabelling its lists' items as `item` when there is one.
fn relabelled(inner: Box<dyn Accumulator>, item: Option<FieldRef>) -> Box<dyn Accumulator> {
    match item {
        Some(item) => Box::new(Relabelled { inner, item }),
        None => inner,
    }
}

fn relabel(array: ArrayRef, item: &FieldRef) -> Result<ArrayRef> {
    let Some(list) = array.as_list_opt::<i32>() else {
        return Ok(array);
    };
    let (_, offsets, values, nulls) = list.clone().into_parts();
    Ok(Arc::new(ListArray::try_new(
        Arc::clone(item),
        offsets,
        values,
        nulls,
    )?))
}

impl AggregateUDFImpl for TypedArrayAgg {
    fn name(&self) -> &str {
        self.imp().name()
    }

    fn aliases(&self) -> &[String] {
        self.imp().aliases()
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().schema_name(params)
    }

    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().human_display(params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.imp().window_function_schema_name(params)
    }

    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().display_name(params)
    }

    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.imp().window_function_display_name(params)
    }

    fn signature(&self) -> &Signature {
        self.imp().signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.imp().return_type(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        let field = self.imp().return_field(arg_fields)?;
        match (arg_fields, field.data_type()) {
            ([arg], DataType::List(item))
                if !arg.metadata().is_empty() && item.data_type() == arg.data_type() =>
            {
                let item = arg
                    .as_ref()
                    .clone()
                    .with_name(item.name())
                    .with_nullable(true);
                let list = DataType::List(Arc::new(item));
                Ok(Arc::new(field.as_ref().clone().with_data_type(list)))
            }
            _ => Ok(field),
        }
    }

    fn is_nullable(&self) -> bool {
        self.imp().is_nullable()
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let item = tagged_item(&args.return_field);
        Ok(relabelled(self.imp().accumulator(args)?, item))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.imp().state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.imp().groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let item = tagged_item(&args.return_field);
        let inner = self.imp().create_groups_accumulator(args)?;
        Ok(match item {
            Some(item) => Box::new(RelabelledGroups { inner, item }),
            None => inner,
        })
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let item = tagged_item(&args.return_field);
        Ok(relabelled(
            self.imp().create_sliding_accumulator(args)?,
            item,
        ))
    }

    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(Arc::clone(self.imp())
            .with_beneficial_ordering(beneficial_ordering)?
            .map(Self::wrap))
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.imp().order_sensitivity()
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        match self.imp().reverse_expr() {
            ReversedUDAF::Reversed(f) => ReversedUDAF::Reversed(Arc::new(
                AggregateUDF::new_from_shared_impl(Self::wrap(Arc::clone(f.inner()))),
            )),
            other => other,
        }
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.imp().coerce_types(arg_types)
    }

    fn is_descending(&self) -> Option<bool> {
        self.imp().is_descending()
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.imp().default_value(data_type)
    }

    fn supports_null_handling_clause(&self) -> bool {
        self.imp().supports_null_handling_clause()
    }

    fn supports_within_group_clause(&self) -> bool {
        self.imp().supports_within_group_clause()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.imp().documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.imp().set_monotonicity(data_type)
    }
}

#[derive(Debug)]
struct Relabelled {
    inner: Box<dyn Accumulator>,
    item: FieldRef,
}

impl Accumulator for Relabelled {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(values)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        match self.inner.evaluate()? {
            ScalarValue::List(list) => {
                let list = relabel(list, &self.item)?;
                Ok(ScalarValue::List(Arc::new(list.as_list::<i32>().clone())))
            }
            other => Ok(other),
        }
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

struct RelabelledGroups {
    inner: Box<dyn GroupsAccumulator>,
    item: FieldRef,
}

impl std::fmt::Debug for RelabelledGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelabelledGroups")
            .field("item", &self.item)
            .finish_non_exhaustive()
    }
}

impl GroupsAccumulator for RelabelledGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        relabel(self.inner.evaluate(emit_to)?, &self.item)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::array::{Int32Array, RecordBatch};
    use arrow::datatypes::Schema;
    use datafusion::prelude::SessionContext;

    use super::*;

    fn oid_field(name: &str) -> Field {
        Field::new(name, DataType::Int32, true).with_metadata(HashMap::from([(
            crate::OID_ALIAS_METADATA_KEY.to_string(),
            "oid".to_string(),
        )]))
    }

    async fn aggregate(sql: &str) -> (FieldRef, Vec<RecordBatch>) {
        let ctx = SessionContext::new();
        ctx.register_udaf(udaf());
        let schema = Arc::new(Schema::new(vec![
            oid_field("o"),
            Field::new("g", DataType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![3, 1, 2])),
                Arc::new(Int32Array::from(vec![1, 1, 2])),
            ],
        )
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        let df = ctx.sql(sql).await.unwrap();
        let field = Arc::clone(df.schema().field(0));
        (field, df.collect().await.unwrap())
    }

    #[tokio::test]
    async fn result_items_keep_the_argument_type() {
        for sql in [
            "SELECT array_agg(o) FROM t",
            "SELECT array_agg(o ORDER BY o) FROM t",
            "SELECT array_agg(o) FROM t GROUP BY g ORDER BY g",
        ] {
            let (field, batches) = aggregate(sql).await;
            let DataType::List(item) = field.data_type() else {
                panic!("{sql}: {field:?}")
            };
            assert_eq!(item.metadata(), oid_field("").metadata(), "{sql}");
            assert_eq!(batches[0].schema().field(0).data_type(), field.data_type());
        }
    }

    #[tokio::test]
    async fn untagged_arguments_are_unchanged() {
        let (field, _) = aggregate("SELECT array_agg(g) FROM t").await;
        assert_eq!(
            field.data_type(),
            &DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true)))
        );
    }
}
