//! PostgreSQL's text form of a one-dimensional array, `{a,"b c",NULL}`:
//! read by COPY and parameters, and by `'{...}'::T[]` casts in SQL.

/// Splits a one-dimensional array literal `{a,"b c",NULL}` into its elements.
pub fn parse_array_literal(v: &str) -> Result<Vec<Option<String>>, String> {
    let inner = v
        .trim()
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or_else(|| format!("malformed array literal: \"{v}\" (expected {{...}})"))?;
    if inner.trim().is_empty() {
        return Ok(vec![]);
    }
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => item.push(
                        chars
                            .next()
                            .ok_or("malformed array literal: dangling backslash")?,
                    ),
                    Some('"') => break,
                    Some(c) => item.push(c),
                    None => {
                        return Err(format!(
                            "malformed array literal: \"{v}\" (unterminated quote)"
                        ));
                    }
                }
            }
        }
        while let Some(&c) = chars.peek() {
            if c == ',' {
                break;
            }
            if c == '{' {
                return Err("multi-dimensional arrays are not supported".into());
            }
            if !quoted {
                item.push(c);
            }
            chars.next();
        }
        let item = if quoted {
            Some(item)
        } else {
            let t = item.trim().to_string();
            if t.eq_ignore_ascii_case("null") {
                None
            } else {
                Some(t)
            }
        };
        out.push(item);
        if chars.next().is_none() {
            break;
        }
    }
    Ok(out)
}
