//! The protobuf wire format, the part NRI's messages use: varints, 64-bit and 32-bit fixed
//! values skipped, length-delimited fields (strings, bytes, messages, maps, packed repeats).
//! Hand-written: the NRI subset isold reads is a dozen fields, and a generated codec would
//! bring protobuf's runtime and a build step for them.

use std::collections::BTreeMap;

/// A message that is not protobuf, or not the message it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {why}")]
pub struct DecodeError {
    /// The message being decoded.
    pub what: &'static str,
    /// What is wrong, and where.
    pub why: String,
}

fn err(what: &'static str, why: impl Into<String>) -> DecodeError {
    DecodeError {
        what,
        why: why.into(),
    }
}

/// One field of a message: its number and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5, skipped by every message isold reads.
    Fixed,
}

/// The fields of one encoded message, in order. Wire types 3 and 4 (groups) and 6 and 7 are
/// refused.
pub fn fields<'a>(
    what: &'static str,
    mut buf: &'a [u8],
) -> Result<Vec<(u32, Value<'a>)>, DecodeError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(what, &mut buf)?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n != 0)
            .ok_or_else(|| err(what, format!("field number {} out of range", key >> 3)))?;
        let value = match key & 7 {
            0 => Value::Varint(varint(what, &mut buf)?),
            1 => {
                skip(what, &mut buf, 8)?;
                Value::Fixed
            }
            5 => {
                skip(what, &mut buf, 4)?;
                Value::Fixed
            }
            2 => {
                let len = varint(what, &mut buf)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= buf.len())
                    .ok_or_else(|| {
                        err(
                            what,
                            format!(
                                "field {number}: length {len} past the end ({} left)",
                                buf.len()
                            ),
                        )
                    })?;
                let (v, rest) = buf.split_at(len);
                buf = rest;
                Value::Bytes(v)
            }
            t => {
                return Err(err(
                    what,
                    format!("field {number}: wire type {t} is not used by NRI"),
                ))
            }
        };
        out.push((number, value));
    }
    Ok(out)
}

fn skip(what: &'static str, buf: &mut &[u8], n: usize) -> Result<(), DecodeError> {
    if buf.len() < n {
        return Err(err(what, "a fixed-size value cut short"));
    }
    *buf = &buf[n..];
    Ok(())
}

/// A varint, consumed from the front of `buf`.
pub fn varint(what: &'static str, buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&b, rest)) = buf.split_first() else {
            return Err(err(what, "a varint cut short"));
        };
        *buf = rest;
        if i == 9 && b > 1 {
            return Err(err(what, "a varint over 64 bits"));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(err(what, "a varint over 10 bytes"))
}

/// A string field's text (UTF-8, as proto3 requires).
pub fn string(what: &'static str, v: &Value) -> Result<String, DecodeError> {
    match v {
        Value::Bytes(b) => std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| err(what, "a string that is not UTF-8")),
        _ => Err(err(what, "a string field of another wire type")),
    }
}

/// A nested message's bytes.
pub fn bytes<'a>(what: &'static str, v: &Value<'a>) -> Result<&'a [u8], DecodeError> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => Err(err(what, "a message field of another wire type")),
    }
}

/// A varint field's value.
pub fn number(what: &'static str, v: &Value) -> Result<u64, DecodeError> {
    match v {
        Value::Varint(n) => Ok(*n),
        _ => Err(err(what, "a number field of another wire type")),
    }
}

/// One entry of a `map<string, string>` field added to `map` only when `keep(key)` and while
/// `map` has fewer than `max` entries; its value cut to `max_value` bytes (at a character
/// boundary). Nothing of a skipped entry is copied: a pod's megabytes of annotations isold
/// does not read cost no memory. Returns whether the entry was kept.
pub fn map_entry_kept(
    what: &'static str,
    v: &Value,
    map: &mut BTreeMap<String, String>,
    keep: impl Fn(&str) -> bool,
    max: usize,
    max_value: usize,
) -> Result<bool, DecodeError> {
    let (mut k, mut val): (Option<&[u8]>, &[u8]) = (None, &[]);
    for (n, f) in fields(what, bytes(what, v)?)? {
        match (n, f) {
            (1, Value::Bytes(b)) => k = Some(b),
            (2, Value::Bytes(b)) => val = b,
            (1 | 2, _) => return Err(err(what, "a map entry of another wire type")),
            _ => {}
        }
    }
    let key = std::str::from_utf8(k.unwrap_or_default())
        .map_err(|_| err(what, "a map key that is not UTF-8"))?;
    if !keep(key) || map.len() >= max {
        return Ok(false);
    }
    let mut end = val.len().min(max_value);
    let text = loop {
        match std::str::from_utf8(&val[..end]) {
            Ok(t) => break t,
            // A character cut by the limit: cut before it.
            Err(e) if e.error_len().is_none() && end < val.len() => end = e.valid_up_to(),
            Err(_) => return Err(err(what, "a map value that is not UTF-8")),
        }
    };
    map.insert(key.to_string(), text.to_string());
    Ok(true)
}

/// A string field's text cut to `max` bytes (identifiers and paths a peer could make
/// arbitrarily long).
pub fn string_capped(what: &'static str, v: &Value, max: usize) -> Result<String, DecodeError> {
    match v {
        Value::Bytes(b) if b.len() > max => Err(err(
            what,
            format!("a string of {} bytes, over {max}", b.len()),
        )),
        _ => string(what, v),
    }
}

/// An encoder: fields appended in order; proto3 defaults (0, "", false) are left out.
#[derive(Debug, Default, Clone)]
pub struct Encoder(pub Vec<u8>);

impl Encoder {
    fn key(&mut self, number: u32, wire: u8) {
        self.raw_varint((u64::from(number) << 3) | u64::from(wire));
    }
    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// A varint field (int32, int64, uint32, uint64, bool, enum), left out when 0.
    pub fn varint(&mut self, number: u32, v: u64) -> &mut Self {
        if v != 0 {
            self.key(number, 0);
            self.raw_varint(v);
        }
        self
    }
    /// A length-delimited field, left out when empty (`always`: written even so).
    pub fn bytes(&mut self, number: u32, b: &[u8], always: bool) -> &mut Self {
        if always || !b.is_empty() {
            self.key(number, 2);
            self.raw_varint(b.len() as u64);
            self.0.extend_from_slice(b);
        }
        self
    }
    /// A string field, left out when empty.
    pub fn string(&mut self, number: u32, s: &str) -> &mut Self {
        self.bytes(number, s.as_bytes(), false)
    }
    /// A `map<string, string>` field.
    pub fn map(&mut self, number: u32, m: &BTreeMap<String, String>) -> &mut Self {
        for (k, v) in m {
            let mut e = Encoder::default();
            e.string(1, k).string(2, v);
            self.bytes(number, &e.0, true);
        }
        self
    }
    /// A nested message, written even when empty (its presence says something).
    pub fn message(&mut self, number: u32, m: &Encoder) -> &mut Self {
        self.bytes(number, &m.0, true)
    }
}
