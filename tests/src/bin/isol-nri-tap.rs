//! isol-nri-tap: records an NRI connection byte for byte, for the containerd scenario
//! (tests/tests/qemu_debian/containerd.rs), which turns the recording into the fixtures of
//! `libtaskisol::nri`'s tests (libtaskisol/tests/fixtures/nri).
//!
//! ```text
//! isol-nri-tap LISTEN UPSTREAM DIR
//! ```
//!
//! Listens on the unix socket LISTEN (the plugin dials it: isold's `[containers] nri_socket`);
//! for each connection it dials UPSTREAM (the runtime's NRI socket) and relays both ways,
//! appending what the runtime sent to `DIR/<n>-runtime.bin` and what the plugin sent to
//! `DIR/<n>-plugin.bin`, n counting connections from 1. Runs until killed.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, upstream, dir] = args.as_slice() else {
        eprintln!("usage: isol-nri-tap LISTEN UPSTREAM DIR");
        std::process::exit(2);
    };
    let _ = std::fs::remove_file(listen);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(&format!("{dir}: {e}")));
    let l = UnixListener::bind(listen).unwrap_or_else(|e| die(&format!("{listen}: {e}")));
    for (n, plugin) in l.incoming().enumerate() {
        let plugin = match plugin {
            Ok(p) => p,
            Err(e) => die(&format!("accept: {e}")),
        };
        let runtime = match UnixStream::connect(upstream) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("isol-nri-tap: {upstream}: {e}");
                continue;
            }
        };
        let file = |who: &str| -> (PathBuf, File) {
            let p = Path::new(dir).join(format!("{}-{who}.bin", n + 1));
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .unwrap_or_else(|e| die(&format!("{}: {e}", p.display())));
            (p, f)
        };
        let (_, to_plugin_log) = file("runtime");
        let (_, to_runtime_log) = file("plugin");
        relay(
            runtime.try_clone().expect("a clone"),
            plugin.try_clone().expect("a clone"),
            to_plugin_log,
        );
        relay(plugin, runtime, to_runtime_log);
    }
}

/// Copy `from` to `to` in a thread of its own, and every byte to `log`; shut both down at the
/// end.
fn relay(mut from: UnixStream, mut to: UnixStream, mut log: File) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let _ = log.write_all(&buf[..n]);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
        let _ = from.shutdown(std::net::Shutdown::Both);
    });
}

fn die(msg: &str) -> ! {
    eprintln!("isol-nri-tap: {msg}");
    std::process::exit(1);
}
