//! NRI's multiplexer: one unix connection (the trunk) carries several logical connections,
//! each frame an 8-byte header (connection id, payload length: u32 big-endian) and the
//! payload. Connection 1 carries the plugin's ttrpc service (the runtime calls it), 2 the
//! runtime's (the plugin calls it). A frame the plugin sends holds at most
//! [`MAX_SENT_PAYLOAD`] bytes: containerd's reader takes a frame whole into a 4096-byte buffer
//! and closes the trunk on a larger one.

/// The plugin's service: the runtime is the client.
pub const PLUGIN_CONN: u32 = 1;
/// The runtime's service: the plugin is the client.
pub const RUNTIME_CONN: u32 = 2;
/// The largest payload of a frame the plugin sends.
pub const MAX_SENT_PAYLOAD: usize = 4096;
/// The largest payload of a frame accepted: a ttrpc message (4 MiB) and its header, as the
/// runtime's sender splits them.
pub const MAX_RECEIVED_PAYLOAD: usize = (4 << 20) + 10;

/// `payload` for connection `conn` as frames of at most [`MAX_SENT_PAYLOAD`] bytes.
pub fn frames(conn: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 8 * (payload.len() / MAX_SENT_PAYLOAD + 1));
    for chunk in payload.chunks(MAX_SENT_PAYLOAD) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// A frame over the size the multiplexer allows: the trunk is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NRI frame of {len} bytes for connection {conn}, over {MAX_RECEIVED_PAYLOAD}")]
pub struct FrameTooBig {
    /// Its connection id.
    pub conn: u32,
    /// Its declared length.
    pub len: usize,
}

/// The trunk's bytes, as they come, cut into frames.
#[derive(Debug, Default)]
pub struct Demux {
    buf: Vec<u8>,
}

impl Demux {
    /// Bytes read from the trunk.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame (connection id, payload), `None` until one is whole.
    pub fn next_frame(&mut self) -> Result<Option<(u32, Vec<u8>)>, FrameTooBig> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let conn = u32::from_be_bytes(self.buf[0..4].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(self.buf[4..8].try_into().expect("4 bytes")) as usize;
        if len > MAX_RECEIVED_PAYLOAD {
            return Err(FrameTooBig { conn, len });
        }
        if self.buf.len() < 8 + len {
            return Ok(None);
        }
        let payload = self.buf[8..8 + len].to_vec();
        self.buf.drain(..8 + len);
        Ok(Some((conn, payload)))
    }
}
