//! PostgreSQL's reading of date and time text: what `'01/02/2024'::date`,
//! `'Jan 2 2024 10:00 PM'::timestamp` and `'2024-01-02 10:00
//! Europe/Berlin'::timestamptz` mean. It follows PostgreSQL's
//! `ParseDateTime` and `DecodeDateTime` (`utils/adt/datetime.c`).
//!
//! The text is cut into fields: dates (`2024-01-02`, `jan-02-2024`),
//! times (`10:00:00.5`), bare numbers, words (month and day names,
//! `AM`/`PM`, `BC`, `epoch`, `today`, zone names) and `+05:30` offsets.
//! Each field then fills what it can of year, month, day, time and zone.
//! A bare number's meaning depends on what is already known and on the
//! session's DateStyle order: `01/02/2024` is January 2nd in MDY and
//! February 1st in DMY. A year of three or more digits is always a year,
//! so ISO dates read the same in every order.

mod decode;
mod fields;

use arrow::array::timezone::Tz;
use chrono::{Duration, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Utc};

use decode::{Decoded, TIME, Zone};
use fields::Special;

/// How DateStyle orders day, month and year when the text does not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DateOrder {
    #[default]
    Mdy,
    Dmy,
    Ymd,
}

impl DateOrder {
    pub fn name(self) -> &'static str {
        match self {
            Self::Mdy => "MDY",
            Self::Dmy => "DMY",
            Self::Ymd => "YMD",
        }
    }
}

impl DateOrder {
    /// The order a DateStyle value (`ISO, DMY`) names.
    pub fn of_date_style(date_style: &str) -> Self {
        let upper = date_style.to_ascii_uppercase();
        if upper.contains("DMY") {
            Self::Dmy
        } else if upper.contains("YMD") {
            Self::Ymd
        } else {
            Self::Mdy
        }
    }
}

/// The DateStyle a `SET DateStyle = value` leaves, from the `current` one:
/// PostgreSQL's keywords (`ISO`, `DMY`/`EURO`, `MDY`/`US`, `YMD`,
/// `DEFAULT`), a half the value does not name kept as it was.
pub fn date_style(value: &str, current: &str) -> Read<String> {
    let invalid = |detail: &str| DateTimeError {
        sqlstate: "22023",
        message: format!("invalid value for parameter \"DateStyle\": \"{value}\"{detail}"),
    };
    let (mut style, mut order) = (None, None);
    for word in value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
    {
        let (new_style, new_order) = match word.to_ascii_uppercase().as_str() {
            "ISO" => (Some("ISO"), None),
            "SQL" | "POSTGRES" | "GERMAN" => {
                return Err(DateTimeError {
                    sqlstate: "0A000",
                    message: format!(
                        "DateStyle output style {word} is not supported: Weir prints dates in ISO style (SET DateStyle = 'ISO, {}')",
                        DateOrder::of_date_style(current).name()
                    ),
                });
            }
            "YMD" => (None, Some(DateOrder::Ymd)),
            "DMY" | "EURO" | "EUROPEAN" => (None, Some(DateOrder::Dmy)),
            "MDY" | "US" | "NONEURO" | "NONEUROPEAN" => (None, Some(DateOrder::Mdy)),
            "DEFAULT" => (Some("ISO"), Some(DateOrder::Mdy)),
            _ => return Err(invalid("")),
        };
        if new_style.is_some() && style.is_some_and(|s| Some(s) != new_style)
            || new_order.is_some() && order.is_some_and(|o| Some(o) != new_order)
        {
            return Err(invalid(": conflicting \"datestyle\" specifications"));
        }
        style = new_style.or(style);
        order = new_order.or(order);
    }
    if style.is_none() && order.is_none() {
        return Err(invalid(""));
    }
    let order = order.unwrap_or_else(|| DateOrder::of_date_style(current));
    Ok(format!("ISO, {}", order.name()))
}

/// What reading date/time text depends on in a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DateTimeContext {
    pub order: DateOrder,
    /// The session's TimeZone as Arrow's `Tz` reads it (`+00:00`,
    /// `Europe/Berlin`): the zone of text that names none.
    pub time_zone: String,
}

impl Default for DateTimeContext {
    fn default() -> Self {
        Self {
            order: DateOrder::Mdy,
            time_zone: "+00:00".into(),
        }
    }
}

/// Text that is not a date or time, with PostgreSQL's SQLSTATE for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DateTimeError {
    pub sqlstate: &'static str,
    pub message: String,
}

type Read<T> = Result<T, DateTimeError>;

/// Reads `date` text (a time or zone in it is ignored, as in PostgreSQL).
pub fn read_date(text: &str, ctx: &DateTimeContext) -> Read<NaiveDate> {
    let decoded = Decoded::of(text, "date", ctx)?;
    match decoded.special {
        Some(Special::Now) => Ok(decoded.now_local()?.date()),
        Some(Special::Epoch) => Ok(NaiveDate::default()),
        Some(Special::Infinity) => Err(decoded.infinite()),
        None => decoded.date(),
    }
}

/// Reads `timestamp` text as microseconds of local time (a zone in it is
/// ignored, as in PostgreSQL).
pub fn read_timestamp(text: &str, ctx: &DateTimeContext) -> Read<i64> {
    let decoded = Decoded::of(text, "timestamp", ctx)?;
    let local = match decoded.special {
        Some(Special::Now) => decoded.now_local()?,
        Some(Special::Epoch) => NaiveDateTime::default(),
        Some(Special::Infinity) => return Err(decoded.infinite()),
        None => decoded.date_time()?,
    };
    Ok(local.and_utc().timestamp_micros())
}

/// Reads `timestamptz` text as microseconds since the epoch in UTC; text
/// without a zone is local time in the session's TimeZone.
pub fn read_timestamptz(text: &str, ctx: &DateTimeContext) -> Read<i64> {
    let decoded = Decoded::of(text, "timestamp with time zone", ctx)?;
    match decoded.special {
        Some(Special::Now) => Ok(Utc::now().timestamp_micros()),
        Some(Special::Epoch) => Ok(0),
        Some(Special::Infinity) => Err(decoded.infinite()),
        None => {
            let local = decoded.date_time()?;
            let offset = match &decoded.zone {
                Some(Zone::Fixed(seconds)) => i64::from(*seconds),
                Some(Zone::Named(tz)) => offset_at(tz, local),
                None => offset_at(&decoded.session_zone()?, local),
            };
            Ok(local.and_utc().timestamp_micros() - offset * 1_000_000)
        }
    }
}

/// Reads `time` text as microseconds since midnight (a date or zone in it
/// is ignored, as in PostgreSQL).
pub fn read_time(text: &str, ctx: &DateTimeContext) -> Read<i64> {
    let decoded = Decoded::of(text, "time", ctx)?;
    match decoded.special {
        Some(Special::Now) => Ok(micros_of_day(decoded.now_local()?.time())),
        Some(_) => Err(decoded.bad_format()),
        None if decoded.mask & TIME == 0 => Err(decoded.bad_format()),
        None => decoded.time_micros(),
    }
}

fn micros_of_day(time: NaiveTime) -> i64 {
    (time - NaiveTime::MIN).num_microseconds().unwrap_or(0)
}

/// The zone's UTC offset in seconds for local time `local`. In a daylight
/// saving gap or overlap the offset in force just before it is used.
fn offset_at(tz: &Tz, local: NaiveDateTime) -> i64 {
    let offset = match tz.from_local_datetime(&local).earliest() {
        Some(at) => at.offset().fix(),
        None => tz
            .offset_from_utc_datetime(&(local - Duration::hours(3)))
            .fix(),
    };
    i64::from(offset.local_minus_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(order: DateOrder) -> DateTimeContext {
        DateTimeContext {
            order,
            ..Default::default()
        }
    }

    fn date(text: &str, order: DateOrder) -> String {
        match read_date(text, &ctx(order)) {
            Ok(d) => d.to_string(),
            Err(e) => e.sqlstate.to_string(),
        }
    }

    #[test]
    fn dates_follow_the_datestyle_order() {
        use DateOrder::*;
        for (text, mdy, dmy, ymd) in [
            ("01/02/2024", "2024-01-02", "2024-02-01", "22008"),
            ("2024-01-02", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("2024/01/02", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("01.02.2024", "2024-01-02", "2024-02-01", "22008"),
            ("1/2/24", "2024-01-02", "2024-02-01", "2001-02-24"),
            ("Jan 2 2024", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("2 Jan 2024", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("January 2, 2024", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("02-Jan-2024", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("2024-Jan-02", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("Tue Jan 02 2024", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("20240102", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("2024.002", "2024-01-02", "2024-01-02", "2024-01-02"),
            ("99-01-02", "22008", "22008", "1999-01-02"),
            ("March 15, 44 BC", "-0043-03-15", "-0043-03-15", "22008"),
            ("13/01/2024", "22008", "2024-01-13", "22008"),
            ("2024-02-30", "22008", "22008", "22008"),
            (
                "2024-01-02 10:00:00+05",
                "2024-01-02",
                "2024-01-02",
                "2024-01-02",
            ),
            ("epoch", "1970-01-01", "1970-01-01", "1970-01-01"),
            ("infinity", "0A000", "0A000", "0A000"),
            ("xyz", "22007", "22007", "22007"),
            ("", "22007", "22007", "22007"),
            ("2024-01-02 2024-01-03", "22007", "22007", "22007"),
            ("0000-01-01", "22008", "22008", "22008"),
        ] {
            assert_eq!(date(text, Mdy), mdy, "{text} in MDY");
            assert_eq!(date(text, Dmy), dmy, "{text} in DMY");
            assert_eq!(date(text, Ymd), ymd, "{text} in YMD");
        }
    }

    /// A read timestamp as its UTC text, or the error's SQLSTATE.
    fn utc_text(read: Read<i64>) -> String {
        match read {
            Ok(t) => chrono::DateTime::from_timestamp_micros(t)
                .unwrap()
                .naive_utc()
                .to_string(),
            Err(e) => e.sqlstate.to_string(),
        }
    }

    fn timestamp(text: &str) -> String {
        utc_text(read_timestamp(text, &ctx(DateOrder::Mdy)))
    }

    #[test]
    fn timestamps_take_minutes_meridiem_and_iso_forms() {
        for (text, expected) in [
            ("2024-01-02 10:00", "2024-01-02 10:00:00"),
            ("2024-01-02T10:00:01.5", "2024-01-02 10:00:01.500"),
            ("2024-01-02 10:00:00.1234567", "2024-01-02 10:00:00.123457"),
            ("01/02/2024 10:00 PM", "2024-01-02 22:00:00"),
            ("Jan 2 2024 12:30 am", "2024-01-02 00:30:00"),
            ("2024-01-02 24:00:00", "2024-01-03 00:00:00"),
            ("2024-01-02 10:00:00+05", "2024-01-02 10:00:00"),
            ("20240102 101112", "2024-01-02 10:11:12"),
            ("2024-01-02", "2024-01-02 00:00:00"),
            ("2024-01-02 13:00 PM", "22008"),
            ("2024-01-02 10:60", "22008"),
            ("2024-01-02 10:00:00:00", "22007"),
            ("10:00", "22007"),
        ] {
            assert_eq!(timestamp(text), expected, "{text}");
        }
    }

    fn timestamptz(text: &str, zone: &str) -> String {
        let ctx = DateTimeContext {
            time_zone: zone.into(),
            ..Default::default()
        };
        utc_text(read_timestamptz(text, &ctx))
    }

    #[test]
    fn timestamptz_text_without_a_zone_is_in_the_session_zone() {
        for (text, zone, utc) in [
            ("2024-01-02 10:00", "+00:00", "2024-01-02 10:00:00"),
            ("2024-01-02 10:00", "Europe/Berlin", "2024-01-02 09:00:00"),
            ("2024-07-02 10:00", "Europe/Berlin", "2024-07-02 08:00:00"),
            (
                "2024-01-02 10:00+05:30",
                "Europe/Berlin",
                "2024-01-02 04:30:00",
            ),
            ("2024-01-02 10:00-0800", "+00:00", "2024-01-02 18:00:00"),
            (
                "2024-01-02T10:00:00Z",
                "Europe/Berlin",
                "2024-01-02 10:00:00",
            ),
            (
                "2024-01-02 10:00 UTC",
                "Europe/Berlin",
                "2024-01-02 10:00:00",
            ),
            ("2024-01-02 10:00 EST", "+00:00", "2024-01-02 15:00:00"),
            (
                "2024-01-02 10:00 America/New_York",
                "+00:00",
                "2024-01-02 15:00:00",
            ),
            ("2024-01-02 10:00 Mars/Olympus", "+00:00", "22023"),
            ("epoch", "Europe/Berlin", "1970-01-01 00:00:00"),
            // 02:30 does not exist on 2024-03-31 in Berlin: read with +01.
            ("2024-03-31 02:30", "Europe/Berlin", "2024-03-31 01:30:00"),
        ] {
            assert_eq!(timestamptz(text, zone), utc, "{text} in {zone}");
        }
    }

    #[test]
    fn times_of_day() {
        let time = |text: &str| match read_time(text, &DateTimeContext::default()) {
            Ok(t) => t.to_string(),
            Err(e) => e.sqlstate.to_string(),
        };
        assert_eq!(time("10:00"), "36000000000");
        assert_eq!(time("10:00 PM"), "79200000000");
        assert_eq!(time("00:00:00.000001"), "1");
        assert_eq!(time("24:00:00"), "86400000000");
        assert_eq!(time("2024-01-02 01:00:00+05"), "3600000000");
        assert_eq!(time("allballs"), "0");
        assert_eq!(time("2024-01-02"), "22007");
        assert_eq!(time("25:00"), "22008");
    }

    #[test]
    fn date_style_keeps_the_half_a_set_does_not_name() {
        assert_eq!(date_style("DMY", "ISO, MDY").unwrap(), "ISO, DMY");
        assert_eq!(date_style("iso", "ISO, DMY").unwrap(), "ISO, DMY");
        assert_eq!(date_style("ISO, European", "ISO, MDY").unwrap(), "ISO, DMY");
        assert_eq!(date_style("default", "ISO, DMY").unwrap(), "ISO, MDY");
        assert_eq!(
            date_style("DMY, MDY", "ISO, MDY").unwrap_err().sqlstate,
            "22023"
        );
        assert_eq!(
            date_style("banana", "ISO, MDY").unwrap_err().sqlstate,
            "22023"
        );
        assert_eq!(
            date_style("SQL, DMY", "ISO, MDY").unwrap_err().sqlstate,
            "0A000"
        );
    }
}
