//! PostgreSQL interval input: `1 day 2 hours`, `3 days 00:00:01`,
//! `1 year 2 months 3 days 04:05:06.5`, `@ 1 minute ago`, `-1 day +02:00`.
//! Arrow's string cast knows only `<number> <unit>` pairs.

const MICROS_PER_SECOND: f64 = 1_000_000.0;
const DAYS_PER_MONTH: f64 = 30.0;
const MICROS_PER_DAY: f64 = 86_400.0 * MICROS_PER_SECOND;

/// An interval as PostgreSQL stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

#[derive(Default)]
struct Acc {
    months: f64,
    days: f64,
    micros: f64,
}

impl Acc {
    /// Adds `n` units; fractions spill into the next smaller field the way
    /// PostgreSQL does (1.5 months = 1 month 15 days).
    fn add(&mut self, n: f64, unit: Unit) {
        match unit {
            Unit::Months(m) => {
                let total = n * m;
                let whole = total.trunc();
                self.months += whole;
                let days = (total - whole) * DAYS_PER_MONTH;
                self.add(days, Unit::Days(1.0));
            }
            Unit::Days(d) => {
                let total = n * d;
                let whole = total.trunc();
                self.days += whole;
                self.micros += (total - whole) * MICROS_PER_DAY;
            }
            Unit::Micros(u) => self.micros += n * u,
        }
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Months(f64),
    Days(f64),
    Micros(f64),
}

fn unit(word: &str) -> Option<Unit> {
    let w = word.to_ascii_lowercase();
    Some(match w.as_str() {
        "microsecond" | "microseconds" | "usec" | "usecs" | "us" => Unit::Micros(1.0),
        "millisecond" | "milliseconds" | "msec" | "msecs" | "ms" => Unit::Micros(1000.0),
        "second" | "seconds" | "sec" | "secs" | "s" => Unit::Micros(MICROS_PER_SECOND),
        "minute" | "minutes" | "min" | "mins" | "m" => Unit::Micros(60.0 * MICROS_PER_SECOND),
        "hour" | "hours" | "hr" | "hrs" | "h" => Unit::Micros(3600.0 * MICROS_PER_SECOND),
        "day" | "days" | "d" => Unit::Days(1.0),
        "week" | "weeks" | "w" => Unit::Days(7.0),
        "month" | "months" | "mon" | "mons" => Unit::Months(1.0),
        "year" | "years" | "yr" | "yrs" | "y" => Unit::Months(12.0),
        "decade" | "decades" | "dec" => Unit::Months(120.0),
        "century" | "centuries" | "c" => Unit::Months(1200.0),
        "millennium" | "millennia" | "mil" | "mils" => Unit::Months(12000.0),
        _ => return None,
    })
}

/// `[-]HH:MM[:SS[.frac]]` or `MM:SS.frac`, in microseconds.
fn time_field(token: &str) -> Option<f64> {
    let (neg, body) = match token.as_bytes().first()? {
        b'-' => (true, &token[1..]),
        b'+' => (false, &token[1..]),
        _ => (false, token),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let num = |s: &str| -> Option<f64> {
        (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .then(|| s.parse().ok())
            .flatten()
    };
    let micros = match parts.as_slice() {
        [h, m] if !m.contains('.') => (num(h)? * 3600.0 + num(m)? * 60.0) * MICROS_PER_SECOND,
        // `MM:SS.frac` when the second part has a fraction.
        [m, s] => (num(m)? * 60.0 + num(s)?) * MICROS_PER_SECOND,
        [h, m, s] => (num(h)? * 3600.0 + num(m)? * 60.0 + num(s)?) * MICROS_PER_SECOND,
        _ => return None,
    };
    Some(if neg { -micros } else { micros })
}

/// Splits `10days` into `10` and `days`.
fn split_number(token: &str) -> (&str, &str) {
    let end = token
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))))
        .map_or(token.len(), |(i, _)| i);
    token.split_at(end)
}

/// Parses PostgreSQL interval text; the error is PostgreSQL's message.
pub fn parse_interval(text: &str) -> Result<Interval, String> {
    let bad = || format!("invalid input syntax for type interval: \"{text}\"");
    let mut acc = Acc::default();
    let mut tokens = text.split_whitespace().peekable();
    let mut seen = false;
    let mut ago = false;
    if tokens.peek() == Some(&"@") {
        tokens.next();
    }
    while let Some(token) = tokens.next() {
        if token.eq_ignore_ascii_case("ago") {
            if tokens.peek().is_some() {
                return Err(bad());
            }
            ago = true;
            continue;
        }
        if token.contains(':') {
            acc.micros += time_field(token).ok_or_else(bad)?;
            seen = true;
            continue;
        }
        let (number, rest) = split_number(token);
        if number.is_empty() || number == "-" || number == "+" {
            return Err(bad());
        }
        let n: f64 = number.parse().map_err(|_| bad())?;
        let unit_word = if rest.is_empty() {
            match tokens.peek() {
                Some(next) if unit(next).is_some() => tokens.next(),
                // A bare number is seconds.
                _ => None,
            }
        } else {
            Some(rest)
        };
        let u = match unit_word {
            Some(w) => unit(w).ok_or_else(bad)?,
            None => Unit::Micros(MICROS_PER_SECOND),
        };
        acc.add(n, u);
        seen = true;
    }
    if !seen {
        return Err(bad());
    }
    let sign = if ago { -1.0 } else { 1.0 };
    let out_of_range = || "interval out of range".to_string();
    let months = sign * acc.months;
    let days = sign * acc.days;
    let micros = (sign * acc.micros).round();
    if months.abs() > f64::from(i32::MAX) || days.abs() > f64::from(i32::MAX) {
        return Err(out_of_range());
    }
    if micros.abs() > i64::MAX as f64 {
        return Err(out_of_range());
    }
    Ok(Interval {
        months: months as i32,
        days: days as i32,
        micros: micros as i64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(months: i32, days: i32, micros: i64) -> Interval {
        Interval {
            months,
            days,
            micros,
        }
    }

    #[test]
    fn postgresql_interval_syntax() {
        let h = 3_600_000_000;
        assert_eq!(parse_interval("1 day 2 hours").unwrap(), iv(0, 1, 2 * h));
        assert_eq!(
            parse_interval("90 minutes").unwrap(),
            iv(0, 0, 90 * 60_000_000)
        );
        assert_eq!(
            parse_interval("1 year 2 months 3 days 04:05:06.5").unwrap(),
            iv(14, 3, 4 * h + 5 * 60_000_000 + 6_500_000)
        );
        assert_eq!(
            parse_interval("3 days 00:00:01").unwrap(),
            iv(0, 3, 1_000_000)
        );
        assert_eq!(parse_interval("-1 day").unwrap(), iv(0, -1, 0));
        assert_eq!(parse_interval("1.5 months").unwrap(), iv(1, 15, 0));
        assert_eq!(
            parse_interval("@ 2 mins ago").unwrap(),
            iv(0, 0, -120_000_000)
        );
        assert_eq!(parse_interval("10").unwrap(), iv(0, 0, 10_000_000));
        assert_eq!(parse_interval("2weeks").unwrap(), iv(0, 14, 0));
        assert!(parse_interval("abc").is_err());
        assert!(parse_interval("").is_err());
        assert!(parse_interval("1 fortnight").is_err());
    }
}
