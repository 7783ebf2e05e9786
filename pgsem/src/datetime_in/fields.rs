//! PostgreSQL's tokenizer for date/time text (`ParseDateTime`) and the
//! words it knows (`DecodeSpecial`'s table, in part).

#[derive(Clone, Copy)]
pub(super) enum Special {
    Now,
    Epoch,
    Infinity,
}

/// A field as PostgreSQL's tokenizer cuts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field<'a> {
    /// Digits or letters joined by `-`, `/` or `.`; after a date it is a
    /// zone name such as `Europe/Berlin`.
    Date(&'a str),
    Time(&'a str),
    Number(&'a str),
    Word(&'a str),
    /// `+05`, `-0530`, `+05:30`.
    Offset(&'a str),
}

fn skip(bytes: &[u8], mut i: usize, keep: impl Fn(u8) -> bool) -> usize {
    while i < bytes.len() && keep(bytes[i]) {
        i += 1;
    }
    i
}

/// Cuts text into fields; `None` for a character no field can hold.
pub(super) fn fields(text: &str) -> Option<Vec<Field<'_>>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let c = b[i];
        if c.is_ascii_digit() {
            i = skip(b, i, |c| c.is_ascii_digit());
            let field = match b.get(i) {
                Some(b':') => {
                    i = skip(b, i, |c| c.is_ascii_digit() || c == b':' || c == b'.');
                    Field::Time
                }
                Some(&sep @ (b'-' | b'/' | b'.')) => {
                    i += 1;
                    if b.get(i).is_some_and(u8::is_ascii_digit) {
                        i = skip(b, i, |c| c.is_ascii_digit());
                        // `1999.008` is a number; three parts must share
                        // their separator to be a date.
                        if b.get(i) == Some(&sep) {
                            i = skip(b, i, |c| c.is_ascii_digit() || c == sep);
                            Field::Date
                        } else if sep == b'.' {
                            Field::Number
                        } else {
                            Field::Date
                        }
                    } else {
                        i = skip(b, i, |c| c.is_ascii_alphanumeric() || c == sep);
                        Field::Date
                    }
                }
                _ => Field::Number,
            };
            out.push(field(&text[start..i]));
        } else if c.is_ascii_alphabetic() {
            i = skip(b, i, |c| c.is_ascii_alphabetic());
            let word = &text[start..i];
            let joined = match b.get(i) {
                Some(b'-' | b'/' | b'.') => true,
                Some(&c) if c.is_ascii_digit() || c == b'+' => keyword(word).is_none(),
                _ => false,
            };
            if joined {
                i = skip(b, i, |c| {
                    c.is_ascii_alphanumeric() || b"+-/_.:".contains(&c)
                });
                out.push(Field::Date(&text[start..i]));
            } else {
                out.push(Field::Word(word));
            }
        } else if c == b'+' || c == b'-' {
            i += 1;
            if b.get(i).is_some_and(u8::is_ascii_alphabetic) {
                // `-infinity`
                i = skip(b, i, |c| c.is_ascii_alphabetic());
                out.push(Field::Word(&text[start..i]));
            } else {
                i = skip(b, i, |c| c.is_ascii_digit() || c == b':');
                if i == start + 1 {
                    return None;
                }
                out.push(Field::Offset(&text[start..i]));
            }
        } else if c.is_ascii_whitespace() || c.is_ascii_punctuation() {
            // PostgreSQL takes other punctuation (`,`) as a separator.
            i += 1;
        } else {
            return None;
        }
    }
    Some(out)
}

#[derive(Clone, Copy)]
pub(super) enum Keyword {
    Month(i64),
    Weekday,
    Am,
    Pm,
    Ad,
    Bc,
    IsoT,
    Special(Special),
    Today(i64),
    Allballs,
    Zone(i32),
}

pub(super) fn keyword(word: &str) -> Option<Keyword> {
    use Keyword as K;
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    const WEEKDAYS: [&str; 7] = [
        "sunday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
    ];
    let w = word.to_ascii_lowercase();
    if w.len() >= 3
        && let Some(m) = MONTHS.iter().position(|m| m.starts_with(&w))
        && (w.len() == 3 || w == "sept" || w == MONTHS[m])
    {
        return Some(K::Month(m as i64 + 1));
    }
    if w.len() >= 3
        && WEEKDAYS
            .iter()
            .any(|d| d.starts_with(&w) && matches!(w.len(), 3 | 4 | 5) || **d == w)
    {
        return Some(K::Weekday);
    }
    let hours = |h: i32| Some(K::Zone(h * 3600));
    match w.as_str() {
        "am" => Some(K::Am),
        "pm" => Some(K::Pm),
        "ad" => Some(K::Ad),
        "bc" => Some(K::Bc),
        "t" => Some(K::IsoT),
        "now" => Some(K::Special(Special::Now)),
        "epoch" => Some(K::Special(Special::Epoch)),
        "infinity" | "+infinity" | "-infinity" => Some(K::Special(Special::Infinity)),
        "today" => Some(K::Today(0)),
        "tomorrow" => Some(K::Today(1)),
        "yesterday" => Some(K::Today(-1)),
        "allballs" => Some(K::Allballs),
        "z" | "zulu" | "utc" | "ut" | "gmt" | "wet" => hours(0),
        "cet" | "bst" | "west" => hours(1),
        "cest" | "eet" => hours(2),
        "eest" | "msk" => hours(3),
        "jst" | "kst" => hours(9),
        "aest" => hours(10),
        "edt" => hours(-4),
        "est" | "cdt" => hours(-5),
        "cst" | "mdt" => hours(-6),
        "mst" | "pdt" => hours(-7),
        "pst" => hours(-8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_cut_like_postgresql() {
        use Field::*;
        assert_eq!(
            fields("2024-01-02T10:00:00.5-05:30").unwrap(),
            vec![
                Date("2024-01-02"),
                Word("T"),
                Time("10:00:00.5"),
                Offset("-05:30")
            ]
        );
        assert_eq!(
            fields("Jan-02-2024 10:00 Europe/Berlin").unwrap(),
            vec![Date("Jan-02-2024"), Time("10:00"), Date("Europe/Berlin")]
        );
        assert_eq!(fields("1999.008").unwrap(), vec![Number("1999.008")]);
        assert!(fields("2024-01-02 ✓").is_none());
    }
}
