//! The built-in operators.
//!
//! - [`constant::Constant`]: VALUES and other fixed relations.
//! - [`map::Map`]: WHERE and SELECT expressions (linear).
//! - [`union::Union`]: UNION ALL (linear).
//! - [`join::Join`]: inner, outer, semi and anti equi-joins with residuals.
//! - [`top_n::TopN`]: ORDER BY .. LIMIT and ROW_NUMBER()/RANK() <= n, per partition.
//! - [`aggregate::Aggregate`]: GROUP BY and aggregates; DISTINCT is an
//!   aggregate with no calls.
//! - [`session_window::SessionWindow`]: SESSION windows, each row with
//!   its session's bounds, re-emitted as sessions merge and split.
//! - [`temporal_filter::TemporalFilter`]: WHERE conjuncts comparing a
//!   time with `now()`, evaluated at each epoch's time.
//! - [`parallel::Parallel`]: any of the keyed ones (aggregate, join,
//!   top-N) as several instances owning disjoint keys, stepped on threads.

pub mod aggregate;
pub mod constant;
pub mod join;
pub mod map;
pub mod parallel;
pub mod session_window;
pub mod temporal_filter;
pub mod top_n;
pub mod union;

#[cfg(test)]
mod checkpoint_tests;
