//! `LogicalPlan -> StreamPlan`: the incremental operator graph of a projection.
//!
//! [`lower`] takes the plan DataFusion bound for the projection's query,
//! rejects what cannot be maintained incrementally ([`checks`]), runs
//! DataFusion's logical optimizer (which decorrelates EXISTS/IN into semi and
//! anti joins and pushes limits into sorts), then walks the optimized plan
//! once, bottom-up, adding one engine operator per plan node:
//!
//! | plan node                       | operator |
//! |---------------------------------|----------|
//! | TableScan                       | a graph source (+ map for its projection and filters) |
//! | Projection, Filter              | map |
//! | Filter with `now()`             | map + temporal filter ([`temporal`]) |
//! | Aggregate, Distinct             | aggregate |
//! | Join                            | join ([`join`]; a window or interval join closes, [`interval`]) |
//! | Union                           | union |
//! | Sort+Limit / Sort with fetch    | top-N |
//! | Filter(rn <= n) over Window     | top-N numbering rows ([`window`]) |
//! | Window of SESSION's bounds      | session window ([`session`]) |
//! | Values, EmptyRelation           | constant |
//!
//! `ORDER BY` without `LIMIT` is dropped: a projection is a set of rows.
//!
//! With more than one worker ([`LowerOptions::workers`]), every operator
//! whose state is split by key (aggregate with GROUP BY, DISTINCT, join
//! with equi keys, top-N per partition) is built once per worker behind a
//! [`Parallel`], and its EXPLAIN line ends in `[N workers]`.

mod checks;
mod interval;
mod join;
mod session;
mod shift;
mod temporal;
mod window;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::{DFSchema, TableReference};
use datafusion::execution::SessionState;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Aggregate, Distinct, EmptyRelation, Expr, FetchType, Limit, LogicalPlan, SkipType, Sort,
    TableScan, Values,
};
use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;
use datafusion::physical_expr::{PhysicalExpr, create_physical_expr, create_physical_sort_exprs};
use weir_common::ChangeBatch;
use weir_engine::ops::aggregate::{Aggregate as AggregateOp, AggregateCall};
use weir_engine::ops::constant::Constant;
use weir_engine::ops::map::Map;
use weir_engine::ops::parallel::{Keyed, Parallel};
use weir_engine::ops::top_n::{Numbering, TopN, TopNSpec};
use weir_engine::ops::union::Union;
use weir_engine::{Graph, Input, Operator};

use crate::PlanError;

/// A relation the projection reads: a table or another projection.
#[derive(Debug, Clone)]
pub struct SourceRef {
    /// The name as the plan bound it.
    pub name: TableReference,
    /// The columns the graph expects, in this order.
    pub schema: SchemaRef,
    /// The relation only ever inserts (a source whose connector says so).
    pub append_only: bool,
    /// The columns that carry a watermark: a source's `WATERMARK FOR`
    /// column, a projection's window columns.
    pub watermarks: Vec<usize>,
}

/// What the planner is told of a relation a query scans.
#[derive(Debug, Clone, Default)]
pub struct ScannedRelation {
    /// It only ever inserts (a source whose connector says so).
    pub append_only: bool,
    /// The columns that carry a watermark, by name: a source's `WATERMARK
    /// FOR` column; the columns a projection's graph gives one
    /// ([`StreamPlan::watermark_columns`]).
    pub watermarks: Vec<String>,
}

/// A projection's operator graph, ready to step.
pub struct StreamPlan {
    /// `Input::Source(i)` of the graph reads `sources[i]`.
    pub sources: Vec<SourceRef>,
    pub graph: Graph,
    /// The projection's columns.
    pub schema: SchemaRef,
    /// One line per operator, for EXPLAIN CREATE PROJECTION.
    pub explain: Vec<String>,
    /// The output only ever inserts (what an append-only sink can take).
    pub append_only: bool,
    /// The output columns that carry a watermark (window columns over a
    /// source with `WATERMARK FOR`): a projection reading this one closes
    /// its own windows by them.
    pub watermark_columns: Vec<String>,
    /// The operators whose state can grow without bound (EXPLAIN lines):
    /// they keep state per key over an input that keeps growing, and no
    /// watermark or time bound closes it.
    pub unbounded_state: Vec<String>,
}

/// How a projection's graph is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LowerOptions {
    /// Instances of each keyed operator, stepped on as many threads
    /// (`weir serve --workers`); 1 builds every operator once.
    pub workers: usize,
    /// `EMIT ON WINDOW CLOSE`: aggregates over a window emit each group
    /// once, when the watermark closes it (an error if none can).
    pub emit_on_window_close: bool,
}

impl Default for LowerOptions {
    fn default() -> Self {
        Self {
            workers: 1,
            emit_on_window_close: false,
        }
    }
}

/// Lowers the bound (analyzed, not yet optimized) plan of a projection
/// query. `relations` says which scanned relations only ever insert (so
/// operators over them can skip retraction state) and which carry a
/// watermark (so windows over them close).
pub fn lower(
    plan: &LogicalPlan,
    state: &SessionState,
    relations: &dyn Fn(&TableReference) -> ScannedRelation,
    options: &LowerOptions,
) -> Result<StreamPlan, PlanError> {
    let plan = &temporal::mark_epoch_time(plan)?;
    checks::maintainable(plan)?;
    let optimized = state.optimize(plan)?;
    checks::no_subqueries(&optimized)?;
    let mut lowering = Lowering {
        graph: Graph::new(0),
        sources: Vec::new(),
        explain: Vec::new(),
        appends: Vec::new(),
        grows: Vec::new(),
        unbounded: Vec::new(),
        props: state.execution_props().clone(),
        planning: PhysicalPlanningContext::default(),
        workers: options.workers.max(1),
        emit_on_window_close: options.emit_on_window_close,
        emitted_on_close: false,
        lowered: HashMap::new(),
    };
    lowering.collect_sources(&optimized, relations)?;
    lowering.graph = Graph::new(lowering.sources.len());
    for (i, source) in lowering.sources.iter().enumerate() {
        for &column in &source.watermarks {
            lowering.graph.declare_source_watermark(i, column);
        }
    }
    let output = lowering.node(&optimized)?;
    if options.emit_on_window_close && !lowering.emitted_on_close {
        return Err(PlanError::InvalidArgument(
            "EMIT ON WINDOW CLOSE needs a GROUP BY column (or a top-N's PARTITION BY column) \
             that a watermark closes: window_start or window_end of TUMBLE or HOP over a source \
             with WATERMARK FOR (or that column itself)"
                .into(),
        ));
    }
    let append_only = lowering.append_only(output);
    let schema: SchemaRef = Arc::new(optimized.schema().as_arrow().clone());
    // The graph's output is its last node; a bare scan still needs one.
    if !matches!(output, Input::Node(i) if i + 1 == lowering.explain.len()) {
        let columns = identity(&schema);
        lowering.add(
            Box::new(Map::new(schema.clone(), None, columns, schema.clone())),
            vec![output],
            "map: output columns".into(),
        )?;
    }
    let last = Input::Node(lowering.explain.len() - 1);
    let watermark_columns = lowering
        .graph
        .watermark_columns(last)
        .into_iter()
        .map(|c| schema.field(c).name().clone())
        .collect();
    Ok(StreamPlan {
        sources: lowering.sources,
        graph: lowering.graph,
        schema,
        explain: lowering.explain,
        append_only,
        watermark_columns,
        unbounded_state: lowering.unbounded,
    })
}

impl StreamPlan {
    /// Makes the graph output `schema` (same column count), casting columns
    /// whose stored type differs from the planned one (the catalog keeps
    /// SQL types, and not every Arrow type has its own SQL type).
    pub fn conform_to(&mut self, schema: SchemaRef) -> Result<(), PlanError> {
        if self.schema.fields().len() != schema.fields().len() {
            return Err(PlanError::InvalidArgument(format!(
                "the query now has {} columns, the projection {}",
                self.schema.fields().len(),
                schema.fields().len()
            )));
        }
        let same = self
            .schema
            .fields()
            .iter()
            .zip(schema.fields())
            .all(|(a, b)| a.data_type() == b.data_type());
        if !same {
            let columns = schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    Arc::new(datafusion::physical_expr::expressions::CastExpr::new(
                        column(&self.schema, i),
                        f.data_type().clone(),
                        None,
                    )) as Arc<dyn PhysicalExpr>
                })
                .collect();
            let last = self.graph.describe().len() - 1;
            let index = self.graph.add(
                Box::new(Map::new(self.schema.clone(), None, columns, schema.clone())),
                vec![Input::Node(last)],
            )?;
            self.explain.push(format!(
                "#{index} map: cast to stored column types <- #{last}"
            ));
        }
        self.schema = schema;
        Ok(())
    }
}

struct Lowering {
    graph: Graph,
    sources: Vec<SourceRef>,
    explain: Vec<String>,
    /// Per node: its output only ever inserts.
    appends: Vec<bool>,
    /// Per node: its output keeps growing (it derives from a relation that
    /// only inserts, so rows keep coming).
    grows: Vec<bool>,
    /// Nodes whose state grows without bound, with their EXPLAIN text.
    unbounded: Vec<String>,
    props: ExecutionProps,
    planning: PhysicalPlanningContext,
    workers: usize,
    emit_on_window_close: bool,
    /// Some aggregate emits on window close.
    emitted_on_close: bool,
    /// Every subplan lowered so far and where its rows come from.
    lowered: HashMap<LogicalPlan, Input>,
}

impl Lowering {
    /// Registers every distinct scanned relation, in plan order, so the graph
    /// knows its source count before any node is added.
    fn collect_sources(
        &mut self,
        plan: &LogicalPlan,
        relations: &dyn Fn(&TableReference) -> ScannedRelation,
    ) -> Result<(), PlanError> {
        if let LogicalPlan::TableScan(scan) = plan
            && !self.sources.iter().any(|s| s.name == scan.table_name)
        {
            let relation = relations(&scan.table_name);
            let schema = scan.source.schema();
            let watermarks = relation
                .watermarks
                .iter()
                .filter_map(|name| schema.index_of(name).ok())
                .collect();
            self.sources.push(SourceRef {
                name: scan.table_name.clone(),
                schema,
                append_only: relation.append_only,
                watermarks,
            });
        }
        for input in plan.inputs() {
            self.collect_sources(input, relations)?;
        }
        Ok(())
    }

    /// Whether the rows of `input` only ever insert.
    fn append_only(&self, input: Input) -> bool {
        match input {
            Input::Source(i) => self.sources[i].append_only,
            Input::Node(i) => self.appends[i],
        }
    }

    /// Whether the rows of `input` keep coming without bound.
    fn grows(&self, input: Input) -> bool {
        match input {
            Input::Source(i) => self.sources[i].append_only,
            Input::Node(i) => self.grows[i],
        }
    }

    /// Notes that node `at` keeps state that grows without bound when
    /// `input` grows: EXPLAIN says so, and CREATE raises a NOTICE naming
    /// it (`#2 join Inner`: its EXPLAIN line up to its details).
    fn unbounded_if_growing(&mut self, at: Input, input: &[Input]) {
        let (Input::Node(i), true) = (at, input.iter().any(|&i| self.grows(i))) else {
            return;
        };
        let line = &self.explain[i];
        let end = line.find(':').or(line.find(" [")).unwrap_or(line.len());
        let short = line[..end].to_string();
        self.explain[i].push_str(
            " [state unbounded: kept per key of an input that keeps growing, \
             and no watermark or time bound closes it]",
        );
        self.unbounded.push(short);
    }

    fn add(
        &mut self,
        operator: Box<dyn Operator>,
        inputs: Vec<Input>,
        description: String,
    ) -> Result<Input, PlanError> {
        let from: Vec<String> = inputs.iter().map(|i| self.input_name(*i)).collect();
        // Maps and unions of inserts insert; constants emit once. Other
        // operators retract (a join's caller says when its output inserts).
        let appends = match operator.name() {
            "map" | "union" => inputs.iter().all(|&i| self.append_only(i)),
            "constant" => true,
            _ => false,
        };
        let grows = inputs.iter().any(|&i| self.grows(i));
        let index = self.graph.add(operator, inputs)?;
        self.appends.push(appends);
        self.grows.push(grows);
        let line = if from.is_empty() {
            format!("#{index} {description}")
        } else {
            format!("#{index} {description} <- {}", from.join(", "))
        };
        self.explain.push(line);
        Ok(Input::Node(index))
    }

    /// `first`, or when there is more than one worker and its state is split
    /// by key, `first` and `workers - 1` more from `more` behind a
    /// [`Parallel`]; with what its EXPLAIN line gets appended.
    fn keyed(
        &self,
        first: Box<dyn Keyed>,
        more: impl Fn() -> Result<Box<dyn Keyed>, PlanError>,
    ) -> Result<(Box<dyn Operator>, String), PlanError> {
        if self.workers <= 1 || !first.shardable() {
            return Ok((first, String::new()));
        }
        let mut instances = vec![first];
        for _ in 1..self.workers {
            instances.push(more()?);
        }
        let suffix = format!(" [{} workers]", self.workers);
        Ok((Box::new(Parallel::new(instances)?), suffix))
    }

    fn input_name(&self, input: Input) -> String {
        match input {
            Input::Source(i) => format!("source {}", self.sources[i].name),
            Input::Node(i) => format!("#{i}"),
        }
    }

    fn physical(&self, expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>, PlanError> {
        if temporal::reads_epoch_time(expr) {
            return Err(PlanError::unsupported(format!(
                "now() in {} (a temporal filter is a WHERE conjunct comparing a time with now(), \
                 on its own, not combined with OR or inside another expression)",
                expr.human_display()
            )));
        }
        Ok(create_physical_expr(
            &shift::as_durations(expr, schema),
            schema,
            &self.props,
            &self.planning,
        )?)
    }

    /// Adds the operators computing `plan`; returns where its rows come from.
    /// The rows have `plan.schema()`'s columns in order.
    ///
    /// A subplan that occurs more than once (q5 counts bids per auction and
    /// window in two subqueries; HOP reads its relation once per window it
    /// puts a row in) is lowered once and its node read by every consumer:
    /// equal plans compute equal rows, and each copy would keep the same
    /// state and do the same work again.
    fn node(&mut self, plan: &LogicalPlan) -> Result<Input, PlanError> {
        if let Some(&input) = self.lowered.get(plan) {
            return Ok(input);
        }
        let input = self.lower_node(plan)?;
        self.lowered.insert(plan.clone(), input);
        Ok(input)
    }

    fn lower_node(&mut self, plan: &LogicalPlan) -> Result<Input, PlanError> {
        match plan {
            LogicalPlan::TableScan(scan) => self.scan(scan),
            LogicalPlan::Projection(p) => {
                let input = self.node(&p.input)?;
                let exprs = p
                    .expr
                    .iter()
                    .map(|e| self.physical(e, p.input.schema()))
                    .collect::<Result<Vec<_>, _>>()?;
                let schema = arrow_schema(plan);
                self.add(
                    Box::new(Map::new(arrow_schema(&p.input), None, exprs, schema)),
                    vec![input],
                    format!("map: {}", display_list(&p.expr)),
                )
            }
            LogicalPlan::Filter(f) => {
                if let Some(input) = window::top_n_filter(self, f)? {
                    return Ok(input);
                }
                temporal::filter(self, f, arrow_schema(plan))
            }
            LogicalPlan::SubqueryAlias(a) => self.node(&a.input),
            LogicalPlan::Aggregate(a) => self.aggregate(a),
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let from = self.node(input)?;
                let schema = arrow_schema(plan);
                let distinct = || -> Result<Box<dyn Keyed>, PlanError> {
                    let keys = identity(&schema);
                    let op = AggregateOp::new(schema.clone(), keys, Vec::new(), schema.clone())?;
                    Ok(Box::new(op))
                };
                // DataFusion's optimizer plans DISTINCT as an aggregate
                // with no calls (which closes by a window column, see
                // `aggregate`); this arm serves a Distinct it left in place.
                let (operator, workers) = self.keyed(distinct()?, distinct)?;
                let at = self.add(operator, vec![from], format!("distinct{workers}"))?;
                self.unbounded_if_growing(at, &[from]);
                Ok(at)
            }
            LogicalPlan::Distinct(Distinct::On(_)) => {
                Err(PlanError::unsupported("DISTINCT ON in a projection"))
            }
            LogicalPlan::Join(j) => self.join(j),
            LogicalPlan::Union(u) => {
                let inputs = u
                    .inputs
                    .iter()
                    .map(|i| self.node(i))
                    .collect::<Result<Vec<_>, _>>()?;
                let schema = arrow_schema(plan);
                self.add(
                    Box::new(Union::new(inputs.len(), schema)),
                    inputs,
                    "union all".into(),
                )
            }
            LogicalPlan::Sort(s) => match s.fetch {
                Some(fetch) => self.top_n(s, 0, fetch),
                // A projection is a set: its order is the reader's ORDER BY.
                None => self.node(&s.input),
            },
            LogicalPlan::Limit(l) => self.limit(l),
            LogicalPlan::Values(v) => self.values(v),
            LogicalPlan::EmptyRelation(e) => self.empty(e),
            LogicalPlan::Window(w) => match session::session_window(self, w)? {
                Some(input) => Ok(input),
                None => Err(PlanError::unsupported(
                    "window functions in a projection, except ROW_NUMBER() or RANK() limited by a WHERE (top-N per partition) and SESSION windows",
                )),
            },
            other => Err(PlanError::unsupported(format!(
                "{} in a projection",
                checks::node_name(other)
            ))),
        }
    }

    fn scan(&mut self, scan: &TableScan) -> Result<Input, PlanError> {
        if scan.fetch.is_some() {
            return Err(PlanError::unsupported(
                "LIMIT without ORDER BY in a projection",
            ));
        }
        let index = self
            .sources
            .iter()
            .position(|s| s.name == scan.table_name)
            .expect("collect_sources saw every scan");
        let source = Input::Source(index);
        let full = DFSchema::try_from_qualified_schema(
            scan.table_name.clone(),
            &self.sources[index].schema,
        )?;
        let projected = scan.projection.is_some()
            && scan.projection.as_ref().map(Vec::len) != Some(full.fields().len());
        if !projected && scan.filters.is_empty() {
            return Ok(source);
        }
        let predicate = conjunction(scan.filters.iter().cloned())
            .map(|p| self.physical(&p, &full))
            .transpose()?;
        let schema: SchemaRef = Arc::new(scan.projected_schema.as_arrow().clone());
        let indices: Vec<usize> = match &scan.projection {
            Some(p) => p.clone(),
            None => (0..full.fields().len()).collect(),
        };
        let columns = indices
            .iter()
            .map(|&i| column(&self.sources[index].schema, i))
            .collect();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let mut description = format!("scan {} [{}]", scan.table_name, names.join(", "));
        if !scan.filters.is_empty() {
            description.push_str(&format!(" where {}", display_list(&scan.filters)));
        }
        self.add(
            Box::new(Map::new(
                self.sources[index].schema.clone(),
                predicate,
                columns,
                schema,
            )),
            vec![source],
            description,
        )
    }

    fn aggregate(&mut self, a: &Aggregate) -> Result<Input, PlanError> {
        if a.group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
        {
            return Err(PlanError::unsupported(
                "GROUPING SETS, ROLLUP and CUBE in a projection",
            ));
        }
        let input = self.node(&a.input)?;
        let input_schema = a.input.schema();
        let group_by = a
            .group_expr
            .iter()
            .map(|e| self.physical(e, input_schema))
            .collect::<Result<Vec<_>, _>>()?;
        let mut calls = Vec::with_capacity(a.aggr_expr.len());
        for e in &a.aggr_expr {
            let lowered = LoweredAggregateBuilder::new(
                e,
                input_schema,
                input_schema.as_arrow(),
                &self.props,
                &self.planning,
            )
            .build()?;
            calls.push(AggregateCall {
                function: lowered.aggregate,
                filter: lowered.filter,
            });
        }
        let schema: SchemaRef = Arc::new(a.schema.as_arrow().clone());
        let input_arrow: SchemaRef = Arc::new(input_schema.as_arrow().clone());
        let append_only = self.append_only(input);
        let watermarked = self.graph.watermark_columns(input);
        let emit_on_close = self.emit_on_window_close;
        let build = || -> Result<AggregateOp, PlanError> {
            let mut operator = AggregateOp::new(
                input_arrow.clone(),
                group_by.clone(),
                calls.clone(),
                schema.clone(),
            )?;
            if let Some(key) = operator.window_key(&watermarked) {
                operator = operator.closing_by(key, emit_on_close);
            }
            Ok(if append_only {
                operator.over_append_only()
            } else {
                operator
            })
        };
        let operator = build()?;
        let window_key = operator.window_key(&watermarked);
        let closes = match window_key {
            Some(key) if emit_on_close => {
                self.emitted_on_close = true;
                format!(
                    " [emits each group once, when the watermark of {} passes it]",
                    a.group_expr[key].human_display()
                )
            }
            Some(key) => format!(
                " [state of a group dropped when the watermark of {} passes it]",
                a.group_expr[key].human_display()
            ),
            None => String::new(),
        };
        // Each call with how it is maintained: `count(*) [running]`.
        let computed: Vec<String> = a
            .aggr_expr
            .iter()
            .zip(operator.strategies())
            .map(|(e, strategy)| format!("{} [{strategy}]", e.human_display()))
            .collect();
        let (operator, workers) = self.keyed(Box::new(operator), || Ok(Box::new(build()?)))?;
        let description = format!(
            "aggregate: group by [{}] compute [{}]{closes}{workers}",
            display_list(&a.group_expr),
            computed.join(", ")
        );
        let at = self.add(operator, vec![input], description)?;
        if window_key.is_none() && !a.group_expr.is_empty() {
            self.unbounded_if_growing(at, &[input]);
        }
        if window_key.is_some() && emit_on_close {
            // Each group's row once, never retracted.
            if let Input::Node(i) = at {
                self.appends[i] = true;
            }
        }
        Ok(at)
    }

    fn limit(&mut self, l: &Limit) -> Result<Input, PlanError> {
        let (SkipType::Literal(skip), FetchType::Literal(fetch)) =
            (l.get_skip_type()?, l.get_fetch_type()?)
        else {
            return Err(PlanError::unsupported(
                "LIMIT or OFFSET that is not a constant in a projection",
            ));
        };
        let LogicalPlan::Sort(sort) = l.input.as_ref() else {
            return Err(PlanError::unsupported(
                "LIMIT or OFFSET without ORDER BY in a projection (which rows it keeps would be arbitrary)",
            ));
        };
        let Some(fetch) = fetch else {
            return Err(PlanError::unsupported(
                "OFFSET without LIMIT in a projection",
            ));
        };
        self.top_n(sort, skip, fetch)
    }

    fn top_n(&mut self, sort: &Sort, offset: usize, limit: usize) -> Result<Input, PlanError> {
        let input = self.node(&sort.input)?;
        let order_by = create_physical_sort_exprs(
            &sort.expr,
            sort.input.schema(),
            &self.props,
            &self.planning,
        )?
        .into_iter()
        .map(|s| (s.expr, s.options))
        .collect();
        let schema: SchemaRef = Arc::new(sort.input.schema().as_arrow().clone());
        let order_text: Vec<String> = sort.expr.iter().map(|s| s.to_string()).collect();
        let spec = TopNSpec {
            input_schema: schema.clone(),
            partition_by: Vec::new(),
            order_by,
            offset,
            limit,
            numbering: Numbering::None,
            output_schema: schema,
        };
        let mut operator = TopN::new(spec)?;
        let append_only = self.append_only(input);
        if append_only {
            operator = operator.over_append_only();
        }
        // What it keeps per partition: `[keeps all rows]`, or over inserts
        // only `[keeps first 10 rows]`.
        let description = format!(
            "top-n: order by [{}] offset {offset} limit {limit} [keeps {}]",
            order_text.join(", "),
            operator.retention()
        );
        let at = self.add(Box::new(operator), vec![input], description)?;
        // Over inserts it keeps its first rows only; else every row.
        if !append_only {
            self.unbounded_if_growing(at, &[input]);
        }
        Ok(at)
    }

    fn values(&mut self, v: &Values) -> Result<Input, PlanError> {
        let schema: SchemaRef = Arc::new(v.schema.as_arrow().clone());
        let empty = DFSchema::empty();
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let mut columns: Vec<Vec<ArrayRef>> = vec![Vec::new(); schema.fields().len()];
        for row in &v.values {
            for (i, expr) in row.iter().enumerate() {
                let value = self
                    .physical(expr, &empty)?
                    .evaluate(&one_row)?
                    .into_array(1)?;
                let value = arrow::compute::cast(&value, schema.field(i).data_type())?;
                columns[i].push(value);
            }
        }
        let arrays = columns
            .iter()
            .map(|parts| {
                let refs: Vec<&dyn arrow::array::Array> =
                    parts.iter().map(|a| a.as_ref()).collect();
                arrow::compute::concat(&refs)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rows = weir_engine::rows::batch_of(&schema, arrays, v.values.len())?;
        self.add(
            Box::new(Constant::new(ChangeBatch::inserts(rows))?),
            vec![],
            format!("values: {} rows", v.values.len()),
        )
    }

    fn empty(&mut self, e: &EmptyRelation) -> Result<Input, PlanError> {
        let schema: SchemaRef = Arc::new(e.schema.as_arrow().clone());
        if e.produce_one_row && !schema.fields().is_empty() {
            return Err(PlanError::unsupported("a one-row relation with columns"));
        }
        // No rows (`WHERE false`, `LIMIT 0`) with any columns, or one row
        // without columns (`SELECT 1`'s input).
        let rows = usize::from(e.produce_one_row);
        let batch = match rows {
            0 => RecordBatch::new_empty(schema.clone()),
            _ => weir_engine::rows::batch_of(&schema, Vec::new(), rows)?,
        };
        self.add(
            Box::new(Constant::new(ChangeBatch::inserts(batch))?),
            vec![],
            format!("constant: {rows} rows"),
        )
    }
}

fn arrow_schema(plan: &LogicalPlan) -> SchemaRef {
    Arc::new(plan.schema().as_arrow().clone())
}

fn column(schema: &Schema, index: usize) -> Arc<dyn PhysicalExpr> {
    Arc::new(datafusion::physical_expr::expressions::Column::new(
        schema.field(index).name(),
        index,
    ))
}

/// Every column of `schema`, in order.
fn identity(schema: &SchemaRef) -> Vec<Arc<dyn PhysicalExpr>> {
    (0..schema.fields().len())
        .map(|i| column(schema, i))
        .collect()
}

fn display_list(exprs: &[Expr]) -> String {
    exprs
        .iter()
        .map(|e| e.human_display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field};
    use datafusion::execution::SessionStateBuilder;

    use super::*;

    #[test]
    fn an_empty_relation_with_columns_lowers_to_no_rows() {
        // What `SELECT k FROM t WHERE false` and `... LIMIT 0` optimize to.
        let schema = Schema::new(vec![Field::new("k", DataType::Int32, true)]);
        let plan = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(DFSchema::try_from(schema).unwrap()),
        });
        let options = LowerOptions::default();
        let state = SessionStateBuilder::new().build();
        let mut stream = lower(&plan, &state, &|_| ScannedRelation::default(), &options).unwrap();
        let out = stream.graph.step(&[]).unwrap();
        assert!(out.is_empty());
        assert_eq!(out.schema().fields().len(), 1);
    }
}
