//! ttrpc over one logical connection: each message a 10-byte header (data length u32 BE,
//! stream id u32 BE, type u8, flags u8) and the data, at most 4 MiB; a request's data is the
//! `ttrpc.Request` envelope (service 1, method 2, payload 3, timeout_nano 4), a response's
//! the `ttrpc.Response` envelope (status 1 {code 1, message 2}, payload 2). NRI's calls are
//! all unary: one request, one response, flags 0, client streams odd.

use super::wire::{self, DecodeError, Encoder};

/// A request.
pub const REQUEST: u8 = 1;
/// A response.
pub const RESPONSE: u8 = 2;
/// The largest message data.
pub const MAX_DATA: usize = 4 << 20;

/// One ttrpc message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Its stream (a client's are odd).
    pub stream: u32,
    /// [`REQUEST`] or [`RESPONSE`] (data, 3, is not used by NRI).
    pub kind: u8,
    /// Its flags.
    pub flags: u8,
    /// The envelope.
    pub data: Vec<u8>,
}

impl Message {
    /// Header and data, as sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(10 + self.data.len());
        out.extend_from_slice(&(self.data.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.data);
        out
    }
}

/// A logical connection's byte stream cut into ttrpc messages.
#[derive(Debug, Default)]
pub struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    /// Bytes of the connection (a frame's payload).
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received that are not yet a whole message.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message, `None` until one is whole; an error for data over 4 MiB.
    pub fn next_message(&mut self) -> Result<Option<Message>, DecodeError> {
        if self.buf.len() < 10 {
            return Ok(None);
        }
        let len = u32::from_be_bytes(self.buf[0..4].try_into().expect("4 bytes")) as usize;
        if len > MAX_DATA {
            return Err(DecodeError {
                what: "ttrpc message",
                why: format!("{len} bytes of data, over {MAX_DATA}"),
            });
        }
        if self.buf.len() < 10 + len {
            return Ok(None);
        }
        let stream = u32::from_be_bytes(self.buf[4..8].try_into().expect("4 bytes"));
        let (kind, flags) = (self.buf[8], self.buf[9]);
        let data = self.buf[10..10 + len].to_vec();
        self.buf.drain(..10 + len);
        Ok(Some(Message {
            stream,
            kind,
            flags,
            data,
        }))
    }
}

/// A call: `ttrpc.Request`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// The service (`nri.pkg.api.v1alpha1.Plugin`).
    pub service: String,
    /// The method (`Configure`, `CreateContainer`, ...).
    pub method: String,
    /// The request message.
    pub payload: Vec<u8>,
    /// The caller's deadline, nanoseconds (0: none).
    pub timeout_nano: i64,
}

impl Request {
    /// Decode a request envelope.
    pub fn decode(data: &[u8]) -> Result<Request, DecodeError> {
        const W: &str = "ttrpc request";
        let mut r = Request::default();
        for (n, v) in wire::fields(W, data)? {
            match n {
                1 => r.service = wire::string(W, &v)?,
                2 => r.method = wire::string(W, &v)?,
                3 => r.payload = wire::bytes(W, &v)?.to_vec(),
                4 => r.timeout_nano = wire::number(W, &v)? as i64,
                _ => {}
            }
        }
        Ok(r)
    }

    /// Encode a request envelope.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        e.string(1, &self.service)
            .string(2, &self.method)
            .bytes(3, &self.payload, false)
            .varint(4, self.timeout_nano as u64);
        e.0
    }
}

/// gRPC's status codes that NRI's runtime tells apart.
pub mod code {
    /// Success.
    pub const OK: u32 = 0;
    /// A request that cannot be read.
    pub const INVALID_ARGUMENT: u32 = 3;
    /// A request the plugin refuses (a claim against the administrator's rule).
    pub const FAILED_PRECONDITION: u32 = 9;
    /// A method the plugin does not have (newer runtimes then fall back to StateChange).
    pub const UNIMPLEMENTED: u32 = 12;
}

/// A reply: `ttrpc.Response`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Response {
    /// Status code ([`code`]).
    pub code: u32,
    /// Status message.
    pub message: String,
    /// The response message.
    pub payload: Vec<u8>,
}

impl Response {
    /// Encode a response envelope.
    pub fn encode(&self) -> Vec<u8> {
        let mut status = Encoder::default();
        status
            .varint(1, u64::from(self.code))
            .string(2, &self.message);
        let mut e = Encoder::default();
        if self.code != code::OK {
            e.message(1, &status);
        }
        e.bytes(2, &self.payload, false);
        e.0
    }

    /// Decode a response envelope.
    pub fn decode(data: &[u8]) -> Result<Response, DecodeError> {
        const W: &str = "ttrpc response";
        let mut r = Response::default();
        for (n, v) in wire::fields(W, data)? {
            match n {
                1 => {
                    for (sn, sv) in wire::fields(W, wire::bytes(W, &v)?)? {
                        match sn {
                            1 => r.code = wire::number(W, &sv)? as u32,
                            2 => r.message = wire::string(W, &sv)?,
                            _ => {}
                        }
                    }
                }
                2 => r.payload = wire::bytes(W, &v)?.to_vec(),
                _ => {}
            }
        }
        Ok(r)
    }
}
