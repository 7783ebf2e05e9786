//! Binary codecs tokio-postgres lacks: NUMERIC (as PostgreSQL's decimal text)
//! and INTERVAL (months, days, microseconds), so tests can send and read these
//! types in the binary format exactly as PostgreSQL lays them out.

use std::error::Error;

use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

type BoxError = Box<dyn Error + Sync + Send>;

/// A NUMERIC as its PostgreSQL text, e.g. `-1234.500` (scale = digits after the point).
#[derive(Debug, Clone, PartialEq)]
pub struct Numeric(pub String);

impl ToSql for Numeric {
    fn to_sql(&self, _ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        let (negative, text) = match self.0.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, self.0.as_str()),
        };
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        let int = int.trim_start_matches('0');
        let groups = |digits: &str| -> Result<Vec<i16>, BoxError> {
            digits
                .as_bytes()
                .chunks(4)
                .map(|c| Ok(std::str::from_utf8(c)?.parse::<i16>()?))
                .collect()
        };
        let int_padded = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
        let frac_padded = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
        let int_groups = groups(&int_padded)?;
        let mut weight = int_groups.len() as i16 - 1;
        let mut digits: Vec<i16> = int_groups
            .into_iter()
            .chain(groups(&frac_padded)?)
            .collect();
        while digits.first() == Some(&0) {
            digits.remove(0);
            weight -= 1;
        }
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            weight = 0;
        }
        out.put_i16(digits.len() as i16);
        out.put_i16(weight);
        out.put_u16(if negative { 0x4000 } else { 0 });
        out.put_u16(frac.len() as u16);
        for d in digits {
            out.put_i16(d);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Numeric {
    fn from_sql(_ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        let word = |i: usize| -> Result<i16, BoxError> {
            Ok(i16::from_be_bytes(
                raw.get(i * 2..i * 2 + 2)
                    .ok_or("short NUMERIC")?
                    .try_into()?,
            ))
        };
        let (ndigits, weight, sign, dscale) = (
            word(0)? as usize,
            word(1)?,
            word(2)? as u16,
            word(3)? as usize,
        );
        if sign == 0xC000 {
            return Ok(Numeric("NaN".into()));
        }
        let digits: Vec<i16> = (0..ndigits)
            .map(|i| word(4 + i))
            .collect::<Result<_, _>>()?;
        // The group with exponent e (value * 10000^e) is digits[weight - e].
        let group = |e: i32| -> i16 {
            let i = weight as i32 - e;
            if i >= 0 && (i as usize) < digits.len() {
                digits[i as usize]
            } else {
                0
            }
        };
        let mut text = String::new();
        if sign == 0x4000 {
            text.push('-');
        }
        if weight < 0 {
            text.push('0');
        } else {
            text.push_str(&group(weight as i32).to_string());
            for e in (0..weight as i32).rev() {
                text.push_str(&format!("{:04}", group(e)));
            }
        }
        if dscale > 0 {
            let mut frac = String::new();
            for k in 1..=dscale.div_ceil(4) as i32 {
                frac.push_str(&format!("{:04}", group(-k)));
            }
            text.push('.');
            text.push_str(&frac[..dscale]);
        }
        Ok(Numeric(text))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

/// An INTERVAL in PostgreSQL's binary layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

impl ToSql for Interval {
    fn to_sql(&self, _ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        out.put_i64(self.micros);
        out.put_i32(self.days);
        out.put_i32(self.months);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Interval {
    fn from_sql(_ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        if raw.len() != 16 {
            return Err(format!("INTERVAL of {} bytes", raw.len()).into());
        }
        Ok(Interval {
            micros: i64::from_be_bytes(raw[0..8].try_into()?),
            days: i32::from_be_bytes(raw[8..12].try_into()?),
            months: i32::from_be_bytes(raw[12..16].try_into()?),
        })
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }
}

#[test]
fn numeric_codec_round_trips_its_own_encoding() {
    for text in [
        "0",
        "1234.500",
        "-0.001",
        "12345678901234567890.123456789",
        "10000",
        "0.5000",
    ] {
        let mut buf = BytesMut::new();
        Numeric(text.into())
            .to_sql(&Type::NUMERIC, &mut buf)
            .unwrap();
        let back = Numeric::from_sql(&Type::NUMERIC, &buf).unwrap();
        assert_eq!(back.0, text, "NUMERIC {text} did not survive encode/decode");
    }
}
