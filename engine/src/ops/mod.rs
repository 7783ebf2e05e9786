//! The built-in operators.
//!
//! - [`constant::Constant`]: VALUES and other fixed relations.
//! - [`map::Map`]: WHERE and SELECT expressions (linear).
//! - [`union::Union`]: UNION ALL (linear).
//! - [`join::Join`]: inner, outer, semi and anti equi-joins with residuals.
//! - [`top_n::TopN`]: ORDER BY .. LIMIT and ROW_NUMBER()/RANK() <= n, per partition.
//! - [`aggregate::Aggregate`]: GROUP BY and aggregates; DISTINCT is an
//!   aggregate with no calls.

pub mod aggregate;
pub mod constant;
pub mod join;
pub mod map;
pub mod top_n;
pub mod union;

#[cfg(test)]
mod checkpoint_tests;
