//! Decoding of the pgoutput messages (protocol version 1) that
//! `pgwire-replication` hands over raw: relations, inserts, updates,
//! deletes and truncates. The crate itself decodes the transaction
//! boundaries (Begin, Commit); everything here sits between them.
//!
//! Values arrive in PostgreSQL's text format (the stream is started
//! without `binary`); [`super::text`] turns them into Arrow columns.

use bytes::Bytes;

/// One column value of a replicated row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    /// A TOASTed value the update left unchanged: pgoutput leaves it out.
    Unchanged,
    /// The value's text (or, with `binary`, its binary send format).
    Text(Bytes),
}

/// A relation as pgoutput describes it before its first change in a
/// session, and again after its definition changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Relation {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
    /// `relreplident`: `d` default (the key), `f` full, `i` index, `n` nothing.
    pub replica_identity: u8,
    pub columns: Vec<RelationColumn>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelationColumn {
    /// Part of the replica identity.
    pub key: bool,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

/// A decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    Relation(Relation),
    Insert {
        relation: u32,
        new: Vec<Value>,
    },
    Update {
        relation: u32,
        /// The old row: all of it under `REPLICA IDENTITY FULL` (`O`), its
        /// key when the key changed (`K`), absent otherwise.
        old: Option<(OldKind, Vec<Value>)>,
        new: Vec<Value>,
    },
    Delete {
        relation: u32,
        old: (OldKind, Vec<Value>),
    },
    Truncate {
        relations: Vec<u32>,
    },
    /// Types, origins and anything newer that a consumer of rows can pass by.
    Other(u8),
}

/// Whether an old row is the whole row or its key only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OldKind {
    /// `K`: the replica identity key's columns only (the rest null).
    Key,
    /// `O`: every column (`REPLICA IDENTITY FULL`).
    Full,
}

/// Why a message did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub String);

struct Reader<'a> {
    data: &'a [u8],
    whole: &'a Bytes,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if self.data.len() < n {
            return Err(DecodeError(format!(
                "truncated message: {what} needs {n} bytes, {} left",
                self.data.len()
            )));
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn i16(&mut self, what: &str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(
            self.take(2, what)?.try_into().expect("2 bytes"),
        ))
    }

    fn i32(&mut self, what: &str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn string(&mut self, what: &str) -> Result<String, DecodeError> {
        let end = self
            .data
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| DecodeError(format!("{what}: unterminated string")))?;
        let text = std::str::from_utf8(&self.data[..end])
            .map_err(|_| DecodeError(format!("{what}: not UTF-8")))?
            .to_string();
        self.data = &self.data[end + 1..];
        Ok(text)
    }

    /// `n` bytes as a slice of the message, without copying.
    fn bytes(&mut self, n: usize, what: &str) -> Result<Bytes, DecodeError> {
        let start = self.whole.len() - self.data.len();
        self.take(n, what)?;
        Ok(self.whole.slice(start..start + n))
    }

    fn tuple(&mut self) -> Result<Vec<Value>, DecodeError> {
        let n = self.i16("column count")?;
        let mut values = Vec::with_capacity(n.max(0) as usize);
        for _ in 0..n {
            values.push(match self.u8("column kind")? {
                b'n' => Value::Null,
                b'u' => Value::Unchanged,
                b't' | b'b' => {
                    let len = self.i32("value length")?;
                    let len = usize::try_from(len)
                        .map_err(|_| DecodeError(format!("negative value length {len}")))?;
                    Value::Text(self.bytes(len, "value")?)
                }
                other => {
                    return Err(DecodeError(format!(
                        "unknown column kind {:?}",
                        other as char
                    )));
                }
            });
        }
        Ok(values)
    }
}

/// Decodes one pgoutput message (not Begin or Commit, which the
/// replication client decodes).
pub(crate) fn decode(data: &Bytes) -> Result<Message, DecodeError> {
    let mut r = Reader {
        data: &data[..],
        whole: data,
    };
    let tag = r.u8("message tag")?;
    Ok(match tag {
        b'R' => {
            let oid = r.i32("relation oid")? as u32;
            let namespace = r.string("namespace")?;
            let name = r.string("relation name")?;
            let replica_identity = r.u8("replica identity")?;
            let n = r.i16("column count")?;
            let mut columns = Vec::with_capacity(n.max(0) as usize);
            for _ in 0..n {
                let flags = r.u8("column flags")?;
                columns.push(RelationColumn {
                    key: flags & 1 == 1,
                    name: r.string("column name")?,
                    type_oid: r.i32("column type")? as u32,
                    type_modifier: r.i32("column type modifier")?,
                });
            }
            Message::Relation(Relation {
                oid,
                namespace,
                name,
                replica_identity,
                columns,
            })
        }
        b'I' => {
            let relation = r.i32("relation oid")? as u32;
            match r.u8("tuple kind")? {
                b'N' => {}
                other => {
                    return Err(DecodeError(format!(
                        "insert: expected a new row, got {:?}",
                        other as char
                    )));
                }
            }
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.i32("relation oid")? as u32;
            let mut old = None;
            let mut kind = r.u8("tuple kind")?;
            if kind == b'K' || kind == b'O' {
                let which = if kind == b'K' {
                    OldKind::Key
                } else {
                    OldKind::Full
                };
                old = Some((which, r.tuple()?));
                kind = r.u8("tuple kind")?;
            }
            if kind != b'N' {
                return Err(DecodeError(format!(
                    "update: expected a new row, got {:?}",
                    kind as char
                )));
            }
            Message::Update {
                relation,
                old,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.i32("relation oid")? as u32;
            let which = match r.u8("tuple kind")? {
                b'K' => OldKind::Key,
                b'O' => OldKind::Full,
                other => {
                    return Err(DecodeError(format!(
                        "delete: expected an old row, got {:?}",
                        other as char
                    )));
                }
            };
            Message::Delete {
                relation,
                old: (which, r.tuple()?),
            }
        }
        b'T' => {
            let n = r.i32("relation count")?;
            let _options = r.u8("truncate options")?;
            let relations = (0..n.max(0))
                .map(|_| r.i32("relation oid").map(|o| o as u32))
                .collect::<Result<_, _>>()?;
            Message::Truncate { relations }
        }
        other => Message::Other(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(out: &mut Vec<u8>, values: &[Option<&str>]) {
        out.extend((values.len() as i16).to_be_bytes());
        for v in values {
            match v {
                None => out.push(b'n'),
                Some("<unchanged>") => out.push(b'u'),
                Some(text) => {
                    out.push(b't');
                    out.extend((text.len() as i32).to_be_bytes());
                    out.extend(text.as_bytes());
                }
            }
        }
    }

    #[test]
    fn relation_and_changes_decode() {
        let mut m = vec![b'R'];
        m.extend(16384u32.to_be_bytes());
        m.extend(b"public\0orders\0");
        m.push(b'f');
        m.extend(2i16.to_be_bytes());
        m.push(1);
        m.extend(b"id\0");
        m.extend(20u32.to_be_bytes());
        m.extend((-1i32).to_be_bytes());
        m.push(0);
        m.extend(b"note\0");
        m.extend(25u32.to_be_bytes());
        m.extend((-1i32).to_be_bytes());
        let Message::Relation(rel) = decode(&Bytes::from(m)).unwrap() else {
            panic!("not a relation")
        };
        assert_eq!((rel.oid, rel.name.as_str()), (16384, "orders"));
        assert_eq!(rel.replica_identity, b'f');
        assert!(rel.columns[0].key && !rel.columns[1].key);
        assert_eq!(rel.columns[1].type_oid, 25);

        let mut m = vec![b'U'];
        m.extend(16384u32.to_be_bytes());
        m.push(b'O');
        tuple(&mut m, &[Some("1"), Some("old")]);
        m.push(b'N');
        tuple(&mut m, &[Some("1"), Some("<unchanged>")]);
        assert_eq!(
            decode(&Bytes::from(m)).unwrap(),
            Message::Update {
                relation: 16384,
                old: Some((
                    OldKind::Full,
                    vec![Value::Text("1".into()), Value::Text("old".into())]
                )),
                new: vec![Value::Text("1".into()), Value::Unchanged],
            }
        );

        let mut m = vec![b'D'];
        m.extend(16384u32.to_be_bytes());
        m.push(b'K');
        tuple(&mut m, &[Some("7"), None]);
        assert_eq!(
            decode(&Bytes::from(m)).unwrap(),
            Message::Delete {
                relation: 16384,
                old: (OldKind::Key, vec![Value::Text("7".into()), Value::Null]),
            }
        );
    }

    #[test]
    fn a_truncated_message_is_an_error_not_a_panic() {
        let mut m = vec![b'I'];
        m.extend(16384u32.to_be_bytes());
        m.push(b'N');
        m.extend(1i16.to_be_bytes());
        m.push(b't');
        m.extend(10i32.to_be_bytes());
        m.extend(b"abc");
        assert!(decode(&Bytes::from(m)).is_err());
        assert!(decode(&Bytes::new()).is_err());
    }
}
