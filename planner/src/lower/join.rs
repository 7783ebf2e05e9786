//! Joins: the kind and inputs DataFusion planned, the equi-keys and
//! residual as physical expressions, and what closes the join's state (a
//! window key, [`window_key`], or a band between times,
//! [`super::interval`]).

use std::sync::Arc;

use datafusion::common::{JoinType, NullEquality};
use datafusion::logical_expr::{Expr, Join};
use weir_engine::Input;
use weir_engine::ops::join::{Closing, Join as JoinOp, JoinKind, JoinSpec, window_key};

use super::{Lowering, interval};
use crate::PlanError;

impl Lowering {
    pub(super) fn join(&mut self, j: &Join) -> Result<Input, PlanError> {
        if j.null_equality == NullEquality::NullEqualsNull {
            return Err(PlanError::unsupported(
                "INTERSECT and EXCEPT (joins where NULL equals NULL) in a projection",
            ));
        }
        // Right semi/anti joins are left ones with the inputs swapped.
        let (kind, left, right, on) = match j.join_type {
            JoinType::Inner => (JoinKind::Inner, &j.left, &j.right, j.on.clone()),
            JoinType::Left => (JoinKind::Left, &j.left, &j.right, j.on.clone()),
            JoinType::Right => (JoinKind::Right, &j.left, &j.right, j.on.clone()),
            JoinType::Full => (JoinKind::Full, &j.left, &j.right, j.on.clone()),
            JoinType::LeftSemi => (JoinKind::Semi, &j.left, &j.right, j.on.clone()),
            JoinType::LeftAnti if j.null_aware => {
                // DataFusion's NOT IN gives up on the whole left side once
                // the right side holds a NULL key, before the correlated
                // condition is checked; SQL asks per left row. Neither
                // answer is safe to maintain, so refuse the correlated form.
                if j.filter.is_some() {
                    return Err(PlanError::unsupported(
                        "NOT IN with a correlated subquery in a projection (use NOT EXISTS)",
                    ));
                }
                (JoinKind::NullAwareAnti, &j.left, &j.right, j.on.clone())
            }
            JoinType::LeftAnti => (JoinKind::Anti, &j.left, &j.right, j.on.clone()),
            JoinType::RightSemi => (JoinKind::Semi, &j.right, &j.left, swap(&j.on)),
            JoinType::RightAnti => (JoinKind::Anti, &j.right, &j.left, swap(&j.on)),
            JoinType::LeftMark | JoinType::RightMark => {
                return Err(PlanError::unsupported(
                    "EXISTS or IN combined with OR in a projection",
                ));
            }
        };
        let left_input = self.node(left)?;
        let right_input = self.node(right)?;
        let on_physical = on
            .iter()
            .map(|(l, r)| {
                Ok((
                    self.physical(l, left.schema())?,
                    self.physical(r, right.schema())?,
                ))
            })
            .collect::<Result<Vec<_>, PlanError>>()?;
        let both = left.schema().join(right.schema())?;
        let residual = j
            .filter
            .as_ref()
            .map(|f| self.physical(f, &both))
            .transpose()?;
        let on_text: Vec<String> = on
            .iter()
            .map(|(l, r)| format!("{} = {}", l.human_display(), r.human_display()))
            .collect();
        let mut description = format!("join {kind:?}: on [{}]", on_text.join(", "));
        if let Some(f) = &j.filter {
            description.push_str(&format!(" filter {}", f.human_display()));
        }
        let spec = JoinSpec {
            kind,
            left_schema: Arc::new(left.schema().as_arrow().clone()),
            right_schema: Arc::new(right.schema().as_arrow().clone()),
            on: on_physical,
            residual,
            output_schema: Arc::new(j.schema.as_arrow().clone()),
        };
        let inserts = kind == JoinKind::Inner
            && self.append_only(left_input)
            && self.append_only(right_input);
        // A side's rows may go by the other side's watermark alone only
        // if its own input never retracts them ([`Closing`]).
        let closing = if self.append_only(left_input) && self.append_only(right_input) {
            Closing::ByOtherSide
        } else {
            Closing::ByBothSides
        };
        let window = window_key(
            &spec,
            &self.graph.watermark_columns(left_input),
            &self.graph.watermark_columns(right_input),
            closing,
        );
        // Failing that, a band between a time of each side in the filter.
        let band = match (window, kind) {
            (None, kind) if kind != JoinKind::NullAwareAnti => interval::band(
                j.filter.as_ref(),
                left.schema(),
                right.schema(),
                &self.graph.watermark_columns(left_input),
                &self.graph.watermark_columns(right_input),
            ),
            _ => None,
        };
        let build = || -> Result<JoinOp, PlanError> {
            Ok(match (window, band) {
                (Some(key), _) => JoinOp::window_join(spec.clone(), key, closing)?,
                (None, Some(band)) => JoinOp::interval_join(spec.clone(), band)?,
                (None, None) => JoinOp::new(spec.clone())?,
            })
        };
        let (operator, workers) = self.keyed(Box::new(build()?), || Ok(Box::new(build()?)))?;
        if let Some(key) = window {
            description.push_str(&match closing {
                Closing::ByOtherSide => format!(
                    " [rows dropped when the other side's watermark of {} passes them]",
                    on_text[key]
                ),
                Closing::ByBothSides => format!(
                    " [rows dropped when both sides' watermarks of {} pass them]",
                    on_text[key]
                ),
            });
        }
        if let Some(band) = band {
            description.push_str(&format!(
                " [rows dropped when both watermarks pass them and the other side's \
                 passes them by the band: {} - {} in [{}, {}]]",
                left.schema().field(band.left).name(),
                right.schema().field(band.right).name(),
                band.lo.map_or("-inf".into(), |v| v.to_string()),
                band.hi.map_or("inf".into(), |v| v.to_string()),
            ));
        }
        description.push_str(&workers);
        let output = self.add(operator, vec![left_input, right_input], description)?;
        // A band bounded on one end only closes one side's rows: the
        // other side's stay (`a.t <= b.t` closes `b` rows, not `a` rows).
        match (window, band) {
            (Some(_), _) => {}
            (None, None) => self.unbounded_if_growing(output, &[left_input, right_input]),
            (None, Some(band)) => {
                let mut kept = Vec::new();
                if band.lo.is_none() {
                    kept.push(left_input);
                }
                if band.hi.is_none() {
                    kept.push(right_input);
                }
                self.unbounded_if_growing(output, &kept);
            }
        }
        // Inner pairs of rows that are never retracted are never retracted.
        if let (true, Input::Node(i)) = (inserts, output) {
            self.appends[i] = true;
        }
        Ok(output)
    }
}

fn swap(on: &[(Expr, Expr)]) -> Vec<(Expr, Expr)> {
    on.iter().map(|(l, r)| (r.clone(), l.clone())).collect()
}
