//! PM QoS: a CPU latency request held on `/dev/cpu_dma_latency` while the daemon runs
//! (closing the file drops it), kept in systemd's file descriptor store so that it never
//! lapses across a restart.

use std::fs;
use std::io::Write;

use libtaskisol::policy::Policy;

use super::os::Env;
use crate::lifecycle;

#[derive(Debug, Default)]
pub struct DmaLatency {
    file: Option<fs::File>,
    /// `file` is in systemd's file descriptor store.
    stored: bool,
}

impl DmaLatency {
    /// The request systemd kept for this unit across a restart, if any.
    pub fn taken_back(env: &Env) -> DmaLatency {
        let file = if env.root.is_host() {
            lifecycle::stored_fd(lifecycle::DMA_FDNAME).map(fs::File::from)
        } else {
            None
        };
        if file.is_some() {
            env.log
                .info("took the CPU latency request back from systemd's file descriptor store");
        }
        DmaLatency {
            stored: file.is_some(),
            file,
        }
    }

    /// Hold the policy's request, or drop it when there is none: the value held. A plain
    /// stop releases it (systemd empties the store of a unit that stops).
    pub fn hold(&mut self, env: &Env, policy: &Policy) -> Option<u32> {
        let Some(us) = policy.pm_qos() else {
            if self.file.take().is_some() && self.stored {
                lifecycle::notify_with_fds(
                    &format!("FDSTOREREMOVE=1\nFDNAME={}", lifecycle::DMA_FDNAME),
                    &[],
                );
                self.stored = false;
            }
            return None;
        };
        let path = env.root.path("/dev/cpu_dma_latency");
        let value = i32::try_from(us).unwrap_or(i32::MAX);
        // A request already held (this process's, or the one systemd kept for it) takes the
        // new value in place: there is no moment without one.
        let held = match self.file.take() {
            Some(f) => Ok(f),
            None => fs::OpenOptions::new().write(true).open(&path),
        };
        match held.and_then(|mut f| f.write_all(&value.to_ne_bytes()).map(|()| f)) {
            Ok(f) => {
                if env.root.is_host() && !self.stored {
                    use std::os::fd::AsRawFd;
                    self.stored = lifecycle::notify_with_fds(
                        &format!("FDSTORE=1\nFDNAME={}", lifecycle::DMA_FDNAME),
                        &[f.as_raw_fd()],
                    );
                }
                self.file = Some(f);
                env.log
                    .debug(&format!("holding {} at {us} us", path.display()));
                Some(us)
            }
            Err(e) => {
                env.log.warn(&format!(
                    "cannot hold {} at {us} us: {}",
                    path.display(),
                    libtaskisol::error::io_strerror(&e)
                ));
                None
            }
        }
    }

    /// The request closed (the daemon stops; systemd's copy stays for a restart).
    pub fn close(&mut self) {
        self.file = None;
    }
}
