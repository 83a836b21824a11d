//! The messages between `isold hook` (or `isold claims`) and the daemon's socket: one JSON
//! object on one line, answered by one [`Reply`] line.

use serde::{Deserialize, Serialize};

use super::{valid_container_id, Claim, ClaimRequest, InputError, MAX_INPUT};

/// A message on the daemon's socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// A container starts and asks for its CPUs.
    Claim(ClaimRequest),
    /// A container stopped: give its CPUs back.
    Release {
        /// The container id.
        container: String,
    },
    /// The claims in force.
    List {},
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was carried out.
    pub ok: bool,
    /// What was done, or why not.
    pub message: String,
    /// The claims in force (for `list`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
}

impl Reply {
    /// A reply without claims.
    pub fn said(ok: bool, message: impl Into<String>) -> Reply {
        Reply {
            ok,
            message: message.into(),
            claims: Vec::new(),
        }
    }
}

impl Message {
    /// Parse one line from the socket. Errors say what is wrong with it.
    pub fn parse(line: &[u8]) -> Result<Message, InputError> {
        if line.len() > MAX_INPUT {
            return Err(InputError::TooBig {
                what: "the message".into(),
                len: line.len(),
            });
        }
        let m: Message = serde_json::from_slice(line).map_err(|e| InputError::Malformed {
            what: "the message".into(),
            expected: "a request (a JSON object: claim, release or list)",
            error: e.to_string(),
        })?;
        let bad = |what: &str, id: &str| InputError::Invalid {
            what: what.into(),
            field: "container id",
            value: id.into(),
            why: "is not a container id",
        };
        match &m {
            Message::Claim(c) if !valid_container_id(&c.container) => {
                Err(bad("the claim", &c.container))
            }
            Message::Release { container } if !valid_container_id(container) => {
                Err(bad("the release", container))
            }
            _ => Ok(m),
        }
    }
}
