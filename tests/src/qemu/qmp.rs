//! A minimal QMP (QEMU Machine Protocol) client: JSON objects over a unix socket.
//! Only what the harness needs: the greeting, qmp_capabilities, and commands whose answer
//! is awaited while asynchronous events are skipped.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[derive(Debug)]
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects once QEMU has created the socket (it does so before the guest starts, but the
    /// process may still be starting when this is called).
    /// `gone` tells whether QEMU has exited: then waiting for its socket is pointless.
    pub fn connect(
        path: &Path,
        timeout: Duration,
        mut gone: impl FnMut() -> bool,
    ) -> Result<Self, String> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if gone() => {
                    return Err(format!(
                        "QEMU exited before its QMP socket {} accepted ({e}); see qemu.log",
                        path.display()
                    ))
                }
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("connect to QMP socket {}: {e}", path.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut qmp = Self {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = qmp.read()?;
        if greeting.get("QMP").is_none() {
            return Err(format!("unexpected QMP greeting: {greeting}"));
        }
        qmp.execute(&json!({"execute": "qmp_capabilities"}))?;
        Ok(qmp)
    }

    fn read(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| format!("read from QMP: {e}"))?;
        if n == 0 {
            return Err("QMP socket closed".into());
        }
        serde_json::from_str(&line).map_err(|e| format!("bad QMP message {line:?}: {e}"))
    }

    /// Sends one command and returns its "return" value, or its error as text.
    pub fn execute(&mut self, command: &Value) -> Result<Value, String> {
        let mut text = command.to_string();
        text.push('\n');
        self.writer
            .write_all(text.as_bytes())
            .map_err(|e| format!("write to QMP: {e}"))?;
        loop {
            let reply = self.read()?;
            if let Some(ret) = reply.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = reply.get("error") {
                return Err(format!("QMP {command} failed: {err}"));
            }
            // anything else is an asynchronous event (e.g. DEVICE_DELETED): not our answer
        }
    }
}
