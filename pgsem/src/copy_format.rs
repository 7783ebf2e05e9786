//! The text and CSV line formats of `COPY`, as PostgreSQL writes and reads
//! them.
//!
//! Encoding ([`encode_copy_line`]) turns one row of already-rendered values
//! (the PostgreSQL text form of each value, `None` for NULL) into one line.
//! Decoding ([`decode_copy`]) turns the concatenated `CopyData` payload of a
//! `COPY ... FROM STDIN` into rows of optional strings; the session then casts
//! them to the table's column types. Both follow PostgreSQL's `copyto.c` /
//! `copyfromparse.c`: backslash escapes and `\N` in text format, quoting with
//! doubled quotes in CSV, an optional header line, and the `\.` end marker.

use crate::PgsemError;

/// `COPY` format options.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyOptions {
    pub format: CopyFormat,
    /// Field delimiter: tab for text, comma for CSV.
    pub delimiter: char,
    /// The NULL marker: `\N` for text, empty for CSV.
    pub null: String,
    /// CSV only: the first line is a header.
    pub header: bool,
    /// CSV only.
    pub quote: char,
    pub escape: char,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    /// PostgreSQL's binary COPY format; the other options do not apply.
    Binary,
}

impl CopyOptions {
    /// PostgreSQL's defaults for `format`, before the statement's options.
    pub fn for_format(format: CopyFormat) -> Self {
        match format {
            CopyFormat::Text => Self {
                format,
                delimiter: '\t',
                null: "\\N".into(),
                header: false,
                quote: '"',
                escape: '"',
            },
            CopyFormat::Csv | CopyFormat::Binary => Self {
                format,
                delimiter: ',',
                null: String::new(),
                header: false,
                quote: '"',
                escape: '"',
            },
        }
    }
}

/// Appends one row, terminated by `\n`, to `out`.
///
/// `values` are the PostgreSQL text renderings of the row's values. For CSV a
/// single-column row whose value is `\.` is quoted so that it cannot be read
/// back as the end-of-data marker.
pub fn encode_copy_line(values: &[Option<&str>], options: &CopyOptions, out: &mut Vec<u8>) {
    let single_column = values.len() == 1;
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            push_char(out, options.delimiter);
        }
        match (value, options.format) {
            (None, _) => out.extend_from_slice(options.null.as_bytes()),
            (Some(v), CopyFormat::Text) => encode_text_value(v, options.delimiter, out),
            (Some(v), CopyFormat::Csv) => encode_csv_value(v, options, single_column, out),
            // Binary rows are written by the server's `copy_binary`, never as lines.
            (Some(v), CopyFormat::Binary) => out.extend_from_slice(v.as_bytes()),
        }
    }
    out.push(b'\n');
}

/// Appends the header line (the column names) to `out`.
pub fn encode_copy_header(names: &[&str], options: &CopyOptions, out: &mut Vec<u8>) {
    let values: Vec<Option<&str>> = names.iter().map(|n| Some(*n)).collect();
    encode_copy_line(&values, options, out);
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

fn encode_text_value(value: &str, delimiter: char, out: &mut Vec<u8>) {
    for c in value.chars() {
        match c {
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{b}' => out.extend_from_slice(b"\\v"),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if c == delimiter => {
                out.push(b'\\');
                push_char(out, c);
            }
            c => push_char(out, c),
        }
    }
}

fn encode_csv_value(value: &str, options: &CopyOptions, single_column: bool, out: &mut Vec<u8>) {
    let needs_quotes = value == options.null
        || (single_column && value == "\\.")
        || value
            .chars()
            .any(|c| c == options.delimiter || c == options.quote || c == '\n' || c == '\r');
    if !needs_quotes {
        out.extend_from_slice(value.as_bytes());
        return;
    }
    push_char(out, options.quote);
    for c in value.chars() {
        if c == options.quote || c == options.escape {
            push_char(out, options.escape);
        }
        push_char(out, c);
    }
    push_char(out, options.quote);
}

/// Parses a `COPY ... FROM STDIN` payload into rows of `ncols` fields each
/// (`None` for NULL).
///
/// Lines end with `\n`, `\r\n` or `\r`. Data after a `\.` line is ignored.
/// Errors name the 1-based line (record) number, counting the header.
pub fn decode_copy(
    data: &[u8],
    options: &CopyOptions,
    ncols: usize,
) -> Result<Vec<Vec<Option<String>>>, PgsemError> {
    let delimiter = single_byte(options.delimiter, "COPY delimiter")?;
    let mut reader = Reader { data, pos: 0 };
    let mut rows = Vec::new();
    let mut line = 0usize;
    while !reader.at_end() {
        line += 1;
        if reader.at_end_marker() {
            break;
        }
        let null = options.null.as_bytes();
        let fields = match options.format {
            CopyFormat::Text => reader.text_record(delimiter, null),
            CopyFormat::Binary => {
                return Err(PgsemError::Internal(
                    "binary COPY data reached the text decoder".into(),
                ));
            }
            CopyFormat::Csv => reader.csv_record(
                delimiter,
                single_byte(options.quote, "COPY quote")?,
                single_byte(options.escape, "COPY escape")?,
                null,
            ),
        }
        .map_err(|msg| copy_error(line, &msg))?;
        if line == 1 && options.header {
            continue;
        }
        rows.push(finish_record(fields, ncols).map_err(|msg| copy_error(line, &msg))?);
    }
    Ok(rows)
}

fn copy_error(line: usize, msg: &str) -> PgsemError {
    PgsemError::CopyData {
        line,
        message: msg.to_string(),
    }
}

fn single_byte(c: char, what: &str) -> Result<u8, PgsemError> {
    if c.is_ascii() {
        Ok(c as u8)
    } else {
        Err(PgsemError::InvalidParameterValue(format!(
            "{what} must be a single one-byte character"
        )))
    }
}

/// One raw field: its bytes (escapes already resolved) and whether the input
/// spelled it exactly like the NULL marker (checked before unescaping, as
/// PostgreSQL does).
struct RawField {
    value: Vec<u8>,
    is_null_marker: bool,
}

fn finish_record(fields: Vec<RawField>, ncols: usize) -> Result<Vec<Option<String>>, String> {
    // An empty line is one empty field, except for a table without columns.
    if ncols == 0 && fields.len() == 1 && fields[0].value.is_empty() && !fields[0].is_null_marker {
        return Ok(Vec::new());
    }
    if fields.len() < ncols {
        return Err(format!("missing data for column {}", fields.len() + 1));
    }
    if fields.len() > ncols {
        return Err("extra data after last expected column".to_owned());
    }
    fields
        .into_iter()
        .map(|f| {
            if f.is_null_marker {
                return Ok(None);
            }
            String::from_utf8(f.value)
                .map(Some)
                .map_err(|_| "invalid byte sequence for encoding \"UTF8\"".to_owned())
        })
        .collect()
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn peek(&self, offset: usize) -> Option<u8> {
        self.data.get(self.pos + offset).copied()
    }

    /// `\.` alone on a line: the end-of-data marker.
    fn at_end_marker(&self) -> bool {
        self.peek(0) == Some(b'\\')
            && self.peek(1) == Some(b'.')
            && matches!(self.peek(2), None | Some(b'\n') | Some(b'\r'))
    }

    /// Consumes a line terminator at the current position, if any.
    fn eat_eol(&mut self) -> bool {
        match self.peek(0) {
            Some(b'\n') => {
                self.pos += 1;
                true
            }
            Some(b'\r') => {
                self.pos += 1;
                if self.peek(0) == Some(b'\n') {
                    self.pos += 1;
                }
                true
            }
            _ => false,
        }
    }

    fn text_record(&mut self, delimiter: u8, null: &[u8]) -> Result<Vec<RawField>, String> {
        let mut fields = Vec::new();
        loop {
            let start = self.pos;
            // A backslash protects the next byte, even a delimiter or newline.
            while let Some(b) = self.peek(0) {
                if b == delimiter || b == b'\n' || b == b'\r' {
                    break;
                }
                self.pos += if b == b'\\' { 2 } else { 1 };
            }
            self.pos = self.pos.min(self.data.len());
            let raw = &self.data[start..self.pos];
            fields.push(RawField {
                value: unescape_text(raw),
                is_null_marker: raw == null,
            });
            match self.peek(0) {
                Some(b) if b == delimiter => self.pos += 1,
                _ => {
                    self.eat_eol();
                    return Ok(fields);
                }
            }
        }
    }

    fn csv_record(
        &mut self,
        delimiter: u8,
        quote: u8,
        escape: u8,
        null: &[u8],
    ) -> Result<Vec<RawField>, String> {
        let mut fields = Vec::new();
        loop {
            let start = self.pos;
            let mut value = Vec::new();
            let mut quoted = false;
            let mut in_quotes = false;
            loop {
                let Some(b) = self.peek(0) else {
                    if in_quotes {
                        return Err("unterminated CSV quoted field".to_owned());
                    }
                    break;
                };
                if in_quotes {
                    self.pos += 1;
                    if b == escape && matches!(self.peek(0), Some(n) if n == quote || n == escape) {
                        value.push(self.data[self.pos]);
                        self.pos += 1;
                    } else if b == quote {
                        in_quotes = false;
                    } else {
                        value.push(b);
                    }
                } else if b == delimiter || b == b'\n' || b == b'\r' {
                    break;
                } else {
                    self.pos += 1;
                    if b == quote {
                        in_quotes = true;
                        quoted = true;
                    } else {
                        value.push(b);
                    }
                }
            }
            let raw = &self.data[start..self.pos];
            fields.push(RawField {
                value,
                is_null_marker: !quoted && raw == null,
            });
            match self.peek(0) {
                Some(b) if b == delimiter => self.pos += 1,
                _ => {
                    self.eat_eol();
                    return Ok(fields);
                }
            }
        }
    }
}

/// Resolves PostgreSQL text-format escapes: `\b \f \n \r \t \v`, octal
/// `\ooo`, hex `\xhh`, and `\c` for any other `c`.
fn unescape_text(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&c) = raw.get(i) else {
            // A lone trailing backslash is kept as written.
            out.push(b'\\');
            break;
        };
        i += 1;
        match c {
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((value & 0xff) as u8);
            }
            b'x' => match raw.get(i).and_then(|&d| hex_digit(d)) {
                Some(first) => {
                    i += 1;
                    let mut value = first;
                    if let Some(second) = raw.get(i).and_then(|&d| hex_digit(d)) {
                        value = value * 16 + second;
                        i += 1;
                    }
                    out.push(value);
                }
                None => out.push(b'x'),
            },
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            other => out.push(other),
        }
    }
    out
}

fn hex_digit(d: u8) -> Option<u8> {
    (d as char).to_digit(16).map(|v| v as u8)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn text() -> CopyOptions {
        CopyOptions {
            format: CopyFormat::Text,
            delimiter: '\t',
            null: "\\N".to_owned(),
            header: false,
            quote: '"',
            escape: '"',
        }
    }

    fn csv() -> CopyOptions {
        CopyOptions {
            format: CopyFormat::Csv,
            delimiter: ',',
            null: String::new(),
            ..text()
        }
    }

    fn row(values: &[Option<&str>]) -> Vec<Option<String>> {
        values.iter().map(|v| v.map(str::to_owned)).collect()
    }

    fn line(values: &[Option<&str>], options: &CopyOptions) -> String {
        let mut out = Vec::new();
        encode_copy_line(values, options, &mut out);
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn text_escapes_specials_and_marks_null() {
        assert_eq!(
            line(&[Some("a\tb"), None, Some("x\\y\nz\r"), Some("")], &text()),
            "a\\tb\t\\N\tx\\\\y\\nz\\r\t\n"
        );
    }

    #[test]
    fn text_decodes_escapes_nulls_and_line_endings() {
        let data = b"1\t\\N\tA\\tB\r\n2\t\\101\\x42\\q\t\\\\N\n";
        assert_eq!(
            decode_copy(data, &text(), 3).expect("decode"),
            vec![
                row(&[Some("1"), None, Some("A\tB")]),
                row(&[Some("2"), Some("ABq"), Some("\\N")]),
            ]
        );
    }

    #[test]
    fn text_backslash_protects_newline_and_delimiter() {
        assert_eq!(
            decode_copy(b"a\\\nb\tc\\\td\n", &text(), 2).expect("decode"),
            vec![row(&[Some("a\nb"), Some("c\td")])]
        );
    }

    #[test]
    fn custom_null_marker_is_matched_before_unescaping() {
        let options = CopyOptions {
            null: "NULL".to_owned(),
            ..text()
        };
        assert_eq!(
            decode_copy(b"NULL\t\\N\n", &options, 2).expect("decode"),
            vec![row(&[None, Some("N")])]
        );
    }

    #[test]
    fn end_marker_stops_reading() {
        assert_eq!(
            decode_copy(b"1\n\\.\n2\n", &text(), 1).expect("decode"),
            vec![row(&[Some("1")])]
        );
        assert_eq!(
            decode_copy(b"1\n\\.", &csv(), 1).expect("decode"),
            vec![row(&[Some("1")])]
        );
    }

    #[test]
    fn csv_quotes_when_needed() {
        assert_eq!(
            line(
                &[
                    Some("plain"),
                    Some("a,b"),
                    Some("say \"hi\""),
                    Some(""),
                    None
                ],
                &csv()
            ),
            "plain,\"a,b\",\"say \"\"hi\"\"\",\"\",\n"
        );
        assert_eq!(line(&[Some("\\.")], &csv()), "\"\\.\"\n");
        assert_eq!(line(&[Some("multi\nline")], &csv()), "\"multi\nline\"\n");
    }

    #[test]
    fn csv_decodes_quotes_nulls_and_embedded_newlines() {
        let data = b"id,name\n1,\"a,b\"\n2,\n3,\"\"\n4,\"x\"\"y\nz\"\n";
        let options = CopyOptions {
            header: true,
            ..csv()
        };
        assert_eq!(
            decode_copy(data, &options, 2).expect("decode"),
            vec![
                row(&[Some("1"), Some("a,b")]),
                row(&[Some("2"), None]),
                row(&[Some("3"), Some("")]),
                row(&[Some("4"), Some("x\"y\nz")]),
            ]
        );
    }

    #[test]
    fn csv_with_distinct_escape_character() {
        let options = CopyOptions {
            escape: '\\',
            ..csv()
        };
        assert_eq!(
            decode_copy(b"\"a\\\"b\\\\c\"\n", &options, 1).expect("decode"),
            vec![row(&[Some("a\"b\\c")])]
        );
        assert_eq!(line(&[Some("a\"b\\c")], &options), "\"a\\\"b\\\\c\"\n");
    }

    #[test]
    fn errors_name_the_line() {
        let err = decode_copy(b"1\t2\n3\n", &text(), 2).expect_err("missing column");
        assert_eq!(err.to_string(), "COPY line 2: missing data for column 2");
        let err = decode_copy(b"1,2,3\n", &csv(), 2).expect_err("extra column");
        assert_eq!(
            err.to_string(),
            "COPY line 1: extra data after last expected column"
        );
        let err = decode_copy(b"1,2\n3,\"open\n", &csv(), 2).expect_err("unterminated");
        assert_eq!(
            err.to_string(),
            "COPY line 2: unterminated CSV quoted field"
        );
        let err = decode_copy(b"ok\n\\377\n", &text(), 1).expect_err("bad utf8");
        assert!(
            err.to_string()
                .starts_with("COPY line 2: invalid byte sequence")
        );
    }

    #[test]
    fn non_ascii_delimiter_is_rejected() {
        let options = CopyOptions {
            delimiter: 'é',
            ..text()
        };
        assert!(decode_copy(b"a\n", &options, 1).is_err());
    }

    fn value() -> impl Strategy<Value = Option<String>> {
        prop::option::of(prop::string::string_regex("[a-c\\\\\t\n\r,\"N. é]{0,6}").expect("regex"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn encode_then_decode_is_identity(
            rows in prop::collection::vec(prop::collection::vec(value(), 3), 0..6),
            use_csv in any::<bool>(),
            header in any::<bool>(),
        ) {
            let options = CopyOptions { header, ..if use_csv { csv() } else { text() } };
            let mut data = Vec::new();
            if header {
                encode_copy_header(&["a", "b", "c"], &options, &mut data);
            }
            for r in &rows {
                let values: Vec<Option<&str>> = r.iter().map(|v| v.as_deref()).collect();
                encode_copy_line(&values, &options, &mut data);
            }
            prop_assert_eq!(decode_copy(&data, &options, 3).expect("decode"), rows);
        }

        #[test]
        fn decoding_garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..64), ncols in 0usize..4) {
            let _ = decode_copy(&data, &text(), ncols);
            let _ = decode_copy(&data, &csv(), ncols);
        }
    }
}
