//! What the fields of date/time text say (`DecodeDateTime`, `DecodeDate`,
//! `DecodeNumber`, `DecodeNumberField`, `ValidateDate`).

use arrow::array::timezone::Tz;
use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Utc};

use super::fields::{Field, Keyword, Special, fields, keyword};
use super::{DateOrder, DateTimeContext, DateTimeError, Read};

// What a field has set, to reject text that says a thing twice.
pub(super) const YEAR: u16 = 1;
pub(super) const MONTH: u16 = 2;
pub(super) const DAY: u16 = 4;
pub(super) const DATE: u16 = YEAR | MONTH | DAY;
pub(super) const DAY_OF_YEAR: u16 = 8;
pub(super) const TIME: u16 = 16;
pub(super) const ZONE: u16 = 32;
pub(super) const MERIDIEM: u16 = 64;
pub(super) const ERA: u16 = 128;
pub(super) const WEEKDAY: u16 = 256;

pub(super) enum Zone {
    Fixed(i32),
    Named(Tz),
}

/// What the fields of one text said.
pub(super) struct Decoded<'a> {
    text: &'a str,
    type_name: &'static str,
    ctx: &'a DateTimeContext,
    pub(super) mask: u16,
    year: i64,
    month: i64,
    day: i64,
    day_of_year: i64,
    two_digit_year: bool,
    text_month: bool,
    bc: bool,
    pm: Option<bool>,
    hour: i64,
    minute: i64,
    second: i64,
    micros: i64,
    pub(super) zone: Option<Zone>,
    pub(super) special: Option<Special>,
}

impl<'a> Decoded<'a> {
    pub(super) fn of(
        text: &'a str,
        type_name: &'static str,
        ctx: &'a DateTimeContext,
    ) -> Read<Self> {
        let mut d = Decoded {
            text,
            type_name,
            ctx,
            mask: 0,
            year: 0,
            month: 0,
            day: 0,
            day_of_year: 0,
            two_digit_year: false,
            text_month: false,
            bc: false,
            pm: None,
            hour: 0,
            minute: 0,
            second: 0,
            micros: 0,
            zone: None,
            special: None,
        };
        let fields = fields(text).ok_or_else(|| d.bad_format())?;
        if fields.is_empty() {
            return Err(d.bad_format());
        }
        for field in fields {
            d.field(field)?;
        }
        d.meridiem()?;
        Ok(d)
    }

    pub(super) fn bad_format(&self) -> DateTimeError {
        DateTimeError {
            sqlstate: "22007",
            message: format!(
                "invalid input syntax for type {}: \"{}\"",
                self.type_name, self.text
            ),
        }
    }

    fn out_of_range(&self) -> DateTimeError {
        DateTimeError {
            sqlstate: "22008",
            message: format!("date/time field value out of range: \"{}\"", self.text),
        }
    }

    pub(super) fn infinite(&self) -> DateTimeError {
        DateTimeError {
            sqlstate: "0A000",
            message: format!(
                "Weir does not store infinite {} values: \"{}\"",
                self.type_name, self.text
            ),
        }
    }

    fn set(&mut self, bits: u16) -> Read<()> {
        if self.mask & bits != 0 {
            return Err(self.bad_format());
        }
        self.mask |= bits;
        Ok(())
    }

    fn field(&mut self, field: Field<'_>) -> Read<()> {
        match field {
            Field::Date(s) if self.mask & (MONTH | DAY) == MONTH | DAY => {
                // After a date, `Europe/Berlin` names a zone.
                if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
                    return Err(self.bad_format());
                }
                self.set(ZONE)?;
                self.zone = Some(Zone::Named(self.named_zone(s)?));
                Ok(())
            }
            Field::Date(s) => self.date_field(s),
            Field::Time(s) => {
                self.set(TIME)?;
                self.time_field(s)
            }
            Field::Number(s) if s.contains('.') => {
                if self.mask & DATE != 0 {
                    return Err(self.bad_format());
                }
                self.date_field(s)
            }
            Field::Number(s)
                if s.len() >= 6 && (self.mask & DATE == 0 || self.mask & TIME == 0) =>
            {
                self.run_together(s)
            }
            Field::Number(s) => self.number(s),
            Field::Word(w) => self.word(w),
            Field::Offset(s) => {
                self.set(ZONE)?;
                let seconds = parse_offset(s).ok_or_else(|| self.bad_format())?;
                self.zone = Some(Zone::Fixed(seconds));
                Ok(())
            }
        }
    }

    fn word(&mut self, word: &str) -> Read<()> {
        let Some(keyword) = keyword(word) else {
            // An unknown word that is no zone name either is no date.
            let zone = self.named_zone(word).map_err(|_| self.bad_format())?;
            self.set(ZONE)?;
            self.zone = Some(Zone::Named(zone));
            return Ok(());
        };
        match keyword {
            Keyword::Month(m) => {
                // `2 Jan` in MDY: the number taken for a month was the day.
                if self.mask & (MONTH | DAY) == MONTH && !self.text_month && self.month <= 31 {
                    self.set(DAY)?;
                    self.day = self.month;
                } else {
                    self.set(MONTH)?;
                }
                self.text_month = true;
                self.month = m;
            }
            Keyword::Weekday => self.set(WEEKDAY)?,
            Keyword::Am | Keyword::Pm => {
                self.set(MERIDIEM)?;
                self.pm = Some(matches!(keyword, Keyword::Pm));
            }
            Keyword::Ad | Keyword::Bc => {
                self.set(ERA)?;
                self.bc = matches!(keyword, Keyword::Bc);
            }
            Keyword::IsoT => {}
            Keyword::Special(special) => {
                self.set(DATE | TIME | ZONE)?;
                self.special = Some(special);
            }
            Keyword::Today(offset) => {
                self.set(DATE)?;
                let date = self.now_local()?.date() + Duration::days(offset);
                (self.year, self.month, self.day) =
                    (date.year().into(), date.month().into(), date.day().into());
            }
            Keyword::Allballs => {
                self.set(TIME | ZONE)?;
                self.zone = Some(Zone::Fixed(0));
            }
            Keyword::Zone(seconds) => {
                self.set(ZONE)?;
                self.zone = Some(Zone::Fixed(seconds));
            }
        }
        Ok(())
    }

    fn named_zone(&self, name: &str) -> Read<Tz> {
        name.parse().map_err(|_| DateTimeError {
            sqlstate: "22023",
            message: format!("time zone \"{name}\" not recognized"),
        })
    }

    pub(super) fn session_zone(&self) -> Read<Tz> {
        self.named_zone(&self.ctx.time_zone)
    }

    pub(super) fn now_local(&self) -> Read<NaiveDateTime> {
        let tz = self.session_zone()?;
        Ok(Utc::now().with_timezone(&tz).naive_local())
    }

    /// PostgreSQL's `DecodeDate`: a `-`, `/` or `.` joined date, its month
    /// names read before its numbers.
    fn date_field(&mut self, s: &str) -> Read<()> {
        let parts: Vec<&str> = s.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(self.bad_format());
        }
        for part in parts
            .iter()
            .filter(|p| p.as_bytes()[0].is_ascii_alphabetic())
        {
            match keyword(part) {
                Some(Keyword::Month(m)) => {
                    self.set(MONTH)?;
                    self.month = m;
                    self.text_month = true;
                }
                _ => return Err(self.bad_format()),
            }
        }
        for part in parts.iter().filter(|p| p.as_bytes()[0].is_ascii_digit()) {
            self.number(part)?;
        }
        Ok(())
    }

    /// PostgreSQL's `DecodeNumber`: which date field a bare number is.
    fn number(&mut self, s: &str) -> Read<()> {
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(self.bad_format());
        }
        let value: i64 = s.parse().map_err(|_| self.out_of_range())?;
        let long = s.len() >= 3;
        if s.len() == 3 && self.mask & DATE == YEAR && (1..=366).contains(&value) {
            self.set(DAY_OF_YEAR | MONTH | DAY)?;
            self.day_of_year = value;
            return Ok(());
        }
        let order = self.ctx.order;
        let what = match self.mask & DATE {
            0 if long || order == DateOrder::Ymd => YEAR,
            0 if order == DateOrder::Dmy => DAY,
            0 => MONTH,
            YEAR | DAY => MONTH,
            MONTH if self.text_month && (long || order == DateOrder::Ymd) => YEAR,
            MONTH => DAY,
            m if m == YEAR | MONTH => {
                if self.text_month && long && self.two_digit_year {
                    // `02-Jan-2024` read in YMD: the first number was the day.
                    self.set(DAY)?;
                    (self.day, self.year, self.two_digit_year) = (self.year, value, false);
                    return Ok(());
                }
                DAY
            }
            m if m == MONTH | DAY => YEAR,
            DATE => return self.run_together(s),
            _ => return Err(self.bad_format()),
        };
        self.set(what)?;
        match what {
            YEAR => {
                self.year = value;
                self.two_digit_year = s.len() <= 2;
            }
            MONTH => self.month = value,
            _ => self.day = value,
        }
        Ok(())
    }

    /// PostgreSQL's `DecodeNumberField`: `20240102`, `240102`, `101112`, `1011`.
    fn run_together(&mut self, s: &str) -> Read<()> {
        let n = s.len();
        let num = |r: std::ops::Range<usize>| s[r].parse::<i64>().unwrap_or(0);
        if self.mask & DATE != DATE && n >= 6 {
            self.set(DATE)?;
            (self.year, self.month, self.day) = (num(0..n - 4), num(n - 4..n - 2), num(n - 2..n));
            self.two_digit_year = n == 6;
            return Ok(());
        }
        if self.mask & TIME == 0 && (n == 4 || n == 6) {
            self.set(TIME)?;
            (self.hour, self.minute) = (num(0..2), num(2..4));
            self.second = if n == 6 { num(4..6) } else { 0 };
            return Ok(());
        }
        Err(self.bad_format())
    }

    /// `h:m`, `h:m:s` or `h:m:s.ffffff`.
    fn time_field(&mut self, s: &str) -> Read<()> {
        let parts: Vec<&str> = s.split(':').collect();
        let int = |p: &str| p.parse::<i64>().ok();
        let seconds = parts.get(2).map(|p| p.split_once('.').unwrap_or((p, "")));
        let read = (2..=3).contains(&parts.len()).then_some(()).and_then(|()| {
            let (hour, minute) = (int(parts[0])?, int(parts[1])?);
            let (second, micros) = match seconds {
                Some((whole, fraction)) if fraction.bytes().all(|c| c.is_ascii_digit()) => {
                    (int(whole)?, fraction_micros(fraction))
                }
                Some(_) => return None,
                None => (0, 0),
            };
            Some((hour, minute, second, micros))
        });
        let (hour, minute, second, micros) = read.ok_or_else(|| self.bad_format())?;
        (self.hour, self.minute, self.second, self.micros) = (hour, minute, second, micros);
        Ok(())
    }

    fn meridiem(&mut self) -> Read<()> {
        if let Some(pm) = self.pm {
            if self.hour > 12 {
                return Err(self.out_of_range());
            }
            if pm && self.hour != 12 {
                self.hour += 12;
            } else if !pm && self.hour == 12 {
                self.hour = 0;
            }
        }
        Ok(())
    }

    pub(super) fn date(&self) -> Read<NaiveDate> {
        if self.mask & DATE != DATE {
            return Err(self.bad_format());
        }
        let mut year = self.year;
        if self.bc {
            if year <= 0 {
                return Err(self.out_of_range());
            }
            year = 1 - year;
        } else if self.two_digit_year {
            year += if year < 70 { 2000 } else { 1900 };
        } else if year <= 0 {
            return Err(self.out_of_range());
        }
        let year = i32::try_from(year).map_err(|_| self.out_of_range())?;
        if self.mask & DAY_OF_YEAR != 0 {
            let doy = u32::try_from(self.day_of_year).map_err(|_| self.out_of_range())?;
            return NaiveDate::from_yo_opt(year, doy).ok_or_else(|| self.out_of_range());
        }
        if !(1..=12).contains(&self.month) && !self.text_month {
            let mut e = self.out_of_range();
            e.message.push_str(&format!(
                " (DateStyle reads it as {}; perhaps you need a different \"datestyle\" setting)",
                self.ctx.order.name()
            ));
            return Err(e);
        }
        u32::try_from(self.month)
            .ok()
            .zip(u32::try_from(self.day).ok())
            .and_then(|(m, d)| NaiveDate::from_ymd_opt(year, m, d))
            .ok_or_else(|| self.out_of_range())
    }

    /// The time of day in microseconds; `24:00:00` and a leap second roll
    /// over, as in PostgreSQL.
    pub(super) fn time_micros(&self) -> Read<i64> {
        let in_range = (0..=24).contains(&self.hour)
            && (0..60).contains(&self.minute)
            && (0..=60).contains(&self.second)
            && (self.hour < 24 || self.minute == 0 && self.second == 0 && self.micros == 0);
        if !in_range {
            return Err(self.out_of_range());
        }
        Ok(((self.hour * 60 + self.minute) * 60 + self.second) * 1_000_000 + self.micros)
    }

    pub(super) fn date_time(&self) -> Read<NaiveDateTime> {
        let date = self.date()?;
        let time = Duration::microseconds(self.time_micros()?);
        date.and_time(NaiveTime::MIN)
            .checked_add_signed(time)
            .ok_or_else(|| self.out_of_range())
    }
}

/// Up to six fractional digits as microseconds, rounded half up on the seventh.
fn fraction_micros(fraction: &str) -> i64 {
    let digits: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(7)
        .collect();
    let seven: i64 = digits.parse().unwrap_or(0);
    (seven + 5) / 10
}

/// `+05`, `-0530`, `+05:30`, `+05:30:15` as seconds east of UTC.
fn parse_offset(s: &str) -> Option<i32> {
    let sign = if s.starts_with('-') { -1 } else { 1 };
    let body = &s[1..];
    let parts: Vec<&str> = if body.contains(':') {
        body.split(':').collect()
    } else if body.len() > 2 {
        let (h, rest) = body.split_at(body.len() - 2);
        if h.len() > 2 {
            let (h, m) = h.split_at(h.len() - 2);
            vec![h, m, rest]
        } else {
            vec![h, rest]
        }
    } else {
        vec![body]
    };
    if parts.len() > 3 || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    let n: Vec<i32> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, sec) = (
        n[0],
        n.get(1).copied().unwrap_or(0),
        n.get(2).copied().unwrap_or(0),
    );
    (h <= 15 && m < 60 && sec < 60).then_some(sign * (h * 3600 + m * 60 + sec))
}
