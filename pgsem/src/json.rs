//! jsonb input: PostgreSQL stores jsonb decomposed, so its text output is
//! normalized: `{"a": [1, 2], "b": 1}` with keys ordered by length then
//! bytes, the last of duplicate keys kept, and one space after `:` and `,`.
//! Numbers keep the text they were written with.

enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn error(&self) -> String {
        format!("invalid input syntax for type json: \"{}\"", self.text)
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.text[self.pos..].chars().next() {
            if matches!(c, ' ' | '\t' | '\n' | '\r') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.text[self.pos..].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > 1000 {
            return Err("stack depth limit exceeded".into());
        }
        self.skip_ws();
        let c = self.text[self.pos..]
            .chars()
            .next()
            .ok_or_else(|| self.error())?;
        Ok(match c {
            'n' if self.eat("null") => Json::Null,
            't' if self.eat("true") => Json::Bool(true),
            'f' if self.eat("false") => Json::Bool(false),
            '"' => Json::String(self.string()?),
            '[' => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if !self.eat("]") {
                    loop {
                        items.push(self.value(depth + 1)?);
                        self.skip_ws();
                        if self.eat("]") {
                            break;
                        }
                        if !self.eat(",") {
                            return Err(self.error());
                        }
                    }
                }
                Json::Array(items)
            }
            '{' => {
                self.pos += 1;
                let mut members = Vec::new();
                self.skip_ws();
                if !self.eat("}") {
                    loop {
                        self.skip_ws();
                        if !self.text[self.pos..].starts_with('"') {
                            return Err(self.error());
                        }
                        let key = self.string()?;
                        self.skip_ws();
                        if !self.eat(":") {
                            return Err(self.error());
                        }
                        members.push((key, self.value(depth + 1)?));
                        self.skip_ws();
                        if self.eat("}") {
                            break;
                        }
                        if !self.eat(",") {
                            return Err(self.error());
                        }
                    }
                }
                Json::Object(members)
            }
            '-' | '0'..='9' => Json::Number(self.number()?),
            _ => return Err(self.error()),
        })
    }

    fn number(&mut self) -> Result<String, String> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let digits = |p: &mut usize| {
            let s = *p;
            while *p < bytes.len() && bytes[*p].is_ascii_digit() {
                *p += 1;
            }
            *p > s
        };
        let mut p = self.pos;
        if bytes.get(p) == Some(&b'-') {
            p += 1;
        }
        if bytes.get(p) == Some(&b'0') {
            p += 1;
        } else if !digits(&mut p) {
            return Err(self.error());
        }
        if bytes.get(p) == Some(&b'.') {
            p += 1;
            if !digits(&mut p) {
                return Err(self.error());
            }
        }
        if matches!(bytes.get(p), Some(b'e' | b'E')) {
            p += 1;
            if matches!(bytes.get(p), Some(b'+' | b'-')) {
                p += 1;
            }
            if !digits(&mut p) {
                return Err(self.error());
            }
        }
        self.pos = p;
        Ok(self.text[start..p].to_string())
    }

    fn string(&mut self) -> Result<String, String> {
        // serde_json decodes escapes (and surrogate pairs) exactly as JSON
        // defines them; find the closing quote first.
        let bytes = self.text.as_bytes();
        let mut p = self.pos + 1;
        while p < bytes.len() {
            match bytes[p] {
                b'\\' => p += 2,
                b'"' => break,
                _ => p += 1,
            }
        }
        if p >= bytes.len() {
            return Err(self.error());
        }
        let literal = &self.text[self.pos..=p];
        self.pos = p + 1;
        serde_json::from_str::<String>(literal).map_err(|_| self.error())
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write(out: &mut String, value: Json) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Json::Number(n) => out.push_str(&n),
        Json::String(s) => write_string(out, &s),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(out, item);
            }
            out.push(']');
        }
        Json::Object(members) => {
            // Last duplicate wins; then PostgreSQL's key order.
            let mut kept: Vec<(String, Json)> = Vec::with_capacity(members.len());
            for (k, v) in members {
                match kept.iter_mut().find(|(existing, _)| *existing == k) {
                    Some(slot) => slot.1 = v,
                    None => kept.push((k, v)),
                }
            }
            kept.sort_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
            out.push('{');
            for (i, (k, v)) in kept.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(out, &k);
                out.push_str(": ");
                write(out, v);
            }
            out.push('}');
        }
    }
}

fn parse(text: &str) -> Result<Json, String> {
    let mut parser = Parser { text, pos: 0 };
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != text.len() {
        return Err(parser.error());
    }
    Ok(value)
}

/// Checks json text; json keeps the text as written.
pub fn validate_json(text: &str) -> Result<(), String> {
    parse(text).map(|_| ())
}

/// Parses jsonb text into its normalized output form.
pub fn normalize_jsonb(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    write(&mut out, parse(text)?);
    Ok(out)
}

/// jsonb's `left @> right`: every object member of `right` is in `left`
/// with a value containing its own, every array element of `right` is
/// contained in some element of `left`, scalars are equal (numbers by
/// value); a top-level array also contains a scalar that is one of its
/// elements, as PostgreSQL's `JsonbDeepContains` has it.
pub fn contains(left: &str, right: &str) -> Result<bool, String> {
    Ok(contains_value(&parse(left)?, &parse(right)?, true))
}

fn contains_value(left: &Json, right: &Json, top: bool) -> bool {
    match (left, right) {
        (Json::Object(members), Json::Object(wanted)) => wanted.iter().all(|(key, value)| {
            // The last of duplicate keys is the member jsonb keeps.
            members
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .is_some_and(|(_, have)| contains_value(have, value, false))
        }),
        (Json::Array(items), Json::Array(wanted)) => wanted
            .iter()
            .all(|w| items.iter().any(|item| contains_value(item, w, false))),
        (Json::Array(items), scalar) if top && !matches!(scalar, Json::Object(_)) => {
            items.iter().any(|item| scalar_equal(item, scalar))
        }
        (a, b) => scalar_equal(a, b),
    }
}

fn scalar_equal(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Null, Json::Null) => true,
        (Json::Bool(x), Json::Bool(y)) => x == y,
        (Json::String(x), Json::String(y)) => x == y,
        (Json::Number(x), Json::Number(y)) => {
            x == y
                || matches!(
                    (x.parse::<rust_decimal::Decimal>(), y.parse::<rust_decimal::Decimal>()),
                    (Ok(x), Ok(y)) if x == y
                )
                || matches!((x.parse::<f64>(), y.parse::<f64>()), (Ok(x), Ok(y)) if x == y)
        }
        _ => false,
    }
}

/// jsonb's `document ? key`: `key` is a key of the top-level object, or a
/// string element of the top-level array (or the string itself).
pub fn has_key(document: &str, key: &str) -> Result<bool, String> {
    Ok(match parse(document)? {
        Json::Object(members) => members.iter().any(|(k, _)| k == key),
        Json::Array(items) => items
            .iter()
            .any(|item| matches!(item, Json::String(s) if s == key)),
        Json::String(s) => s == key,
        _ => false,
    })
}

/// One step into a json value: an object's key or an array's position
/// (negative counts from the end).
pub enum Step<'a> {
    Key(&'a str),
    Index(i64),
}

/// The text of the member `step` names in the json `text`, as written
/// there; `None` when there is none (or `text` is not that kind of value).
pub fn member<'t>(text: &'t str, step: &Step) -> Result<Option<&'t str>, String> {
    let mut parser = Parser { text, pos: 0 };
    parser.skip_ws();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut found = None;
    match (parser.text[parser.pos..].chars().next(), step) {
        (Some('{'), Step::Key(wanted)) => {
            parser.pos += 1;
            parser.skip_ws();
            if parser.eat("}") {
                return Ok(None);
            }
            loop {
                parser.skip_ws();
                let key = parser.string()?;
                parser.skip_ws();
                if !parser.eat(":") {
                    return Err(parser.error());
                }
                parser.skip_ws();
                let start = parser.pos;
                parser.value(1)?;
                // The last of duplicate keys, as jsonb keeps it.
                if key == *wanted {
                    found = Some((start, parser.pos));
                }
                parser.skip_ws();
                if parser.eat("}") {
                    break;
                }
                if !parser.eat(",") {
                    return Err(parser.error());
                }
            }
        }
        (Some('['), Step::Index(index)) => {
            parser.pos += 1;
            parser.skip_ws();
            if !parser.eat("]") {
                loop {
                    parser.skip_ws();
                    let start = parser.pos;
                    parser.value(1)?;
                    spans.push((start, parser.pos));
                    parser.skip_ws();
                    if parser.eat("]") {
                        break;
                    }
                    if !parser.eat(",") {
                        return Err(parser.error());
                    }
                }
            }
            let at = if *index < 0 {
                i64::try_from(spans.len()).unwrap_or(i64::MAX) + index
            } else {
                *index
            };
            found = usize::try_from(at).ok().and_then(|i| spans.get(i).copied());
        }
        _ => {}
    }
    Ok(found.map(|(start, end)| &text[start..end]))
}

/// A json value as `->>` gives it: a string unquoted and unescaped, `null`
/// as SQL NULL, anything else its json text.
pub fn as_text(value: &str) -> Result<Option<String>, String> {
    Ok(match parse(value)? {
        Json::Null => None,
        Json::String(s) => Some(s),
        _ => Some(value.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_and_existence_follow_jsonb() {
        for (left, right, expected) in [
            (r#"{"a":1,"b":{"c":[1,2]}}"#, r#"{"b":{"c":[2]}}"#, true),
            (r#"{"a":1}"#, r#"{"a":1,"b":2}"#, false),
            (r#"[[1,2],3]"#, r#"[[1]]"#, true),
            (r#"[1,[2]]"#, r#"[2]"#, false),
            (r#"[1,2]"#, "2", true),
            (r#"{"a":[1]}"#, r#"{"a":1}"#, false),
            (r#"{"a":1,"a":2}"#, r#"{"a":2}"#, true),
            (r#"{"n":1.50}"#, r#"{"n":1.5}"#, true),
            ("null", "null", true),
        ] {
            assert_eq!(
                contains(left, right).unwrap(),
                expected,
                "{left} @> {right}"
            );
        }
        assert!(has_key(r#"{"a":null}"#, "a").unwrap());
        assert!(!has_key(r#"[["a"]]"#, "a").unwrap());
        assert!(has_key(r#""a""#, "a").unwrap());
        assert!(contains("{", "{}").is_err());
    }

    #[test]
    fn jsonb_is_normalized_like_postgresql() {
        assert_eq!(
            normalize_jsonb(r#"{"b": 1,  "a": [1,2]}"#).unwrap(),
            r#"{"a": [1, 2], "b": 1}"#
        );
        assert_eq!(
            normalize_jsonb(r#"{"bb":1,"a":2,"a":3}"#).unwrap(),
            r#"{"a": 3, "bb": 1}"#
        );
        assert_eq!(normalize_jsonb(r#" "\u00e9\n" "#).unwrap(), "\"é\\n\"");
        assert_eq!(
            normalize_jsonb("[1.50, -0, 1e2]").unwrap(),
            "[1.50, -0, 1e2]"
        );
        for bad in [r#"{"a": "#, "[1,]", "01", "{a: 1}", "", "[1] x"] {
            assert!(normalize_jsonb(bad).is_err(), "{bad}");
        }
    }
}
