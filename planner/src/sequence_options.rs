//! Sequence options in any order.
//!
//! PostgreSQL takes the options of `CREATE SEQUENCE` and of
//! `GENERATED ... AS IDENTITY (...)` in any order, and tools write them so
//! (Hibernate: `create sequence s start with 1 increment by 50`). sqlparser
//! reads them only as `INCREMENT, MINVALUE, MAXVALUE, START, CACHE, CYCLE`.
//! The options mean the same in any order, so each run of them is put in
//! sqlparser's order before parsing; text without such a run is left as is.
//!
//! Also `nextval('s'::regclass)` (how PostgreSQL prints a `SERIAL` default,
//! and so how dumps write it) loses its cast: the compatibility rewrites
//! would turn the cast into a `pg_class` subquery, which a column default
//! cannot hold, and the sequence functions take the name as text.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// Where a clause goes in sqlparser's order, if `word` starts one.
fn rank(word: &str) -> Option<u8> {
    Some(match word.to_ascii_lowercase().as_str() {
        "increment" => 0,
        "minvalue" => 1,
        "maxvalue" => 2,
        "start" => 3,
        "cache" => 4,
        "cycle" => 5,
        _ => return None,
    })
}

fn word(token: &Token) -> Option<&str> {
    match token {
        Token::Word(w) if w.quote_style.is_none() => Some(&w.value),
        _ => None,
    }
}

/// The tokens of some SQL, and the indexes of those that are not
/// whitespace (positions `k` below count only those).
fn tokenize(sql: &str) -> Option<(Vec<Token>, Vec<usize>)> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let significant = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    Some((tokens, significant))
}

/// Whether significant token `k` is the unquoted word `w`.
fn is_word(tokens: &[Token], significant: &[usize], k: usize, w: &str) -> bool {
    significant
        .get(k)
        .and_then(|&i| word(&tokens[i]))
        .is_some_and(|x| x.eq_ignore_ascii_case(w))
}

/// `sql` with its sequence options reordered, or `None` when nothing moved.
pub fn reorder_sequence_options(sql: &str) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    if !lower.contains("sequence") && !lower.contains("identity") {
        return None;
    }
    let (tokens, significant) = tokenize(sql)?;
    let is = |k: usize, w: &str| is_word(&tokens, &significant, k, w);
    // Runs of options, as ranges of `significant`.
    let mut runs = Vec::new();
    let mut statement_start = true;
    for k in 0..significant.len() {
        let token = &tokens[significant[k]];
        if *token == Token::SemiColon {
            statement_start = true;
            continue;
        }
        let at_start = std::mem::replace(&mut statement_start, false);
        if at_start && is(k, "create") {
            // CREATE [TEMP|TEMPORARY] SEQUENCE [IF NOT EXISTS] name [AS type]
            let mut j = k + 1;
            if is(j, "temp") || is(j, "temporary") {
                j += 1;
            }
            if !is(j, "sequence") {
                continue;
            }
            j += 1;
            if is(j, "if") {
                j += 3;
            }
            j += 1;
            while significant
                .get(j)
                .is_some_and(|&i| tokens[i] == Token::Period)
            {
                j += 2;
            }
            if is(j, "as") {
                j += 2;
            }
            let end = (j..significant.len())
                .find(|&e| is(e, "owned") || tokens[significant[e]] == Token::SemiColon)
                .unwrap_or(significant.len());
            runs.push(j..end);
        } else if is(k, "identity")
            && k > 0
            && is(k - 1, "as")
            && significant
                .get(k + 1)
                .is_some_and(|&i| tokens[i] == Token::LParen)
        {
            let end = (k + 2..significant.len())
                .find(|&e| tokens[significant[e]] == Token::RParen)
                .unwrap_or(significant.len());
            runs.push(k + 2..end);
        }
    }
    let mut replaced: Vec<(usize, usize, String)> = Vec::new();
    for run in runs {
        // Split into clauses, each starting at an option keyword (`NO`
        // takes the keyword after it).
        let mut clauses: Vec<(u8, Vec<usize>)> = Vec::new();
        let mut k = run.start;
        while k < run.end {
            let text = word(&tokens[significant[k]]);
            let starts = match text {
                Some(w) if w.eq_ignore_ascii_case("no") => significant
                    .get(k + 1)
                    .and_then(|&i| word(&tokens[i]))
                    .and_then(rank),
                Some(w) => rank(w),
                None => None,
            };
            match (starts, clauses.last_mut()) {
                (Some(r), _) => {
                    let mut members = vec![k];
                    if text.is_some_and(|w| w.eq_ignore_ascii_case("no")) {
                        k += 1;
                        members.push(k);
                    }
                    clauses.push((r, members));
                }
                (None, Some((_, members))) => members.push(k),
                // Not an option run after all: leave it alone.
                (None, None) => {
                    clauses.clear();
                    break;
                }
            }
            k += 1;
        }
        if clauses.windows(2).all(|w| w[0].0 <= w[1].0) {
            continue;
        }
        let mut sorted = clauses.clone();
        sorted.sort_by_key(|(r, _)| *r);
        let text: Vec<String> = sorted
            .iter()
            .map(|(_, members)| {
                let (first, last) = (
                    significant[members[0]],
                    significant[*members.last().unwrap()],
                );
                tokens[first..=last]
                    .iter()
                    .map(ToString::to_string)
                    .collect()
            })
            .collect();
        replaced.push((
            significant[run.start],
            significant[run.end - 1],
            text.join(" "),
        ));
    }
    if replaced.is_empty() {
        return None;
    }
    let mut out = String::new();
    let mut at = 0;
    for (first, last, text) in replaced {
        out.extend(tokens[at..first].iter().map(ToString::to_string));
        out.push_str(&text);
        at = last + 1;
    }
    out.extend(tokens[at..].iter().map(ToString::to_string));
    Some(out)
}

/// `sql` with `nextval('name'::regclass)` (or `::pg_catalog.regclass`, and
/// the same for `currval` and `setval`) written `nextval('name')`, or
/// `None` when it has none.
pub fn strip_regclass_casts(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("regclass") {
        return None;
    }
    let (tokens, significant) = tokenize(sql)?;
    let is_word = |k: usize, w: &str| is_word(&tokens, &significant, k, w);
    let is = |k: usize, t: &Token| significant.get(k).is_some_and(|&i| &tokens[i] == t);
    let mut dropped = vec![false; tokens.len()];
    for k in 0..significant.len() {
        let function = ["nextval", "currval", "setval"]
            .iter()
            .any(|f| is_word(k, f));
        let literal = matches!(
            significant.get(k + 2).map(|&i| &tokens[i]),
            Some(Token::SingleQuotedString(_))
        );
        if !(function && is(k + 1, &Token::LParen) && literal && is(k + 3, &Token::DoubleColon)) {
            continue;
        }
        let cast_end = if is_word(k + 4, "regclass") {
            k + 4
        } else if is_word(k + 4, "pg_catalog")
            && is(k + 5, &Token::Period)
            && is_word(k + 6, "regclass")
        {
            k + 6
        } else {
            continue;
        };
        for i in significant[k + 3]..=significant[cast_end] {
            dropped[i] = true;
        }
    }
    if !dropped.contains(&true) {
        return None;
    }
    Some(
        tokens
            .iter()
            .zip(dropped)
            .filter(|(_, drop)| !drop)
            .map(|(t, _)| t.to_string())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::reorder_sequence_options as reorder;
    use super::strip_regclass_casts as strip;

    #[test]
    fn sequence_functions_take_the_name_without_its_regclass_cast() {
        assert_eq!(
            strip("CREATE TABLE t (id INT DEFAULT nextval('public.t_id_seq'::regclass))")
                .as_deref(),
            Some("CREATE TABLE t (id INT DEFAULT nextval('public.t_id_seq'))")
        );
        assert_eq!(
            strip("SELECT setval('s' :: pg_catalog.regclass, 5), currval('s'::REGCLASS)")
                .as_deref(),
            Some("SELECT setval('s' , 5), currval('s')")
        );
        assert_eq!(strip("SELECT 't'::regclass"), None);
        assert_eq!(strip("SELECT nextval('s')"), None);
    }

    #[test]
    fn options_are_put_in_the_parsers_order() {
        assert_eq!(
            reorder("create sequence s start with 1 increment by 50").as_deref(),
            Some("create sequence s increment by 50 start with 1")
        );
        assert_eq!(
            reorder("CREATE SEQUENCE app.s AS int CYCLE NO MAXVALUE START 3 OWNED BY t.id;")
                .as_deref(),
            Some("CREATE SEQUENCE app.s AS int NO MAXVALUE START 3 CYCLE OWNED BY t.id;")
        );
        assert_eq!(
            reorder("CREATE TABLE t (id INT GENERATED BY DEFAULT AS IDENTITY (START WITH 100 INCREMENT BY 10) PRIMARY KEY)").as_deref(),
            Some("CREATE TABLE t (id INT GENERATED BY DEFAULT AS IDENTITY (INCREMENT BY 10 START WITH 100) PRIMARY KEY)")
        );
    }

    #[test]
    fn text_in_order_or_without_options_is_left_alone() {
        assert_eq!(reorder("CREATE SEQUENCE s INCREMENT 2 START 5"), None);
        assert_eq!(reorder("SELECT nextval('sequence')"), None);
        assert_eq!(
            reorder("CREATE TABLE t (id INT GENERATED ALWAYS AS IDENTITY)"),
            None
        );
        assert_eq!(reorder("CREATE SEQUENCE IF NOT EXISTS s"), None);
    }
}
