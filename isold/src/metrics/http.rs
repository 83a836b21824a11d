//! The metrics' loopback HTTP listener.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use libtaskisol::policy::config::MetricsConfig;

use super::Metrics;

/// How the metrics listener bounds its scrapers: 64 connections at once, 2 s from the
/// accept to the whole request head, 5 s to take the answer, heads up to 8 KiB.
pub const LIMITS: crate::peers::Limits = crate::peers::Limits {
    max_conns: 64,
    read: Duration::from_secs(2),
    write: Duration::from_secs(5),
    max_request: 8192,
};

/// The loopback HTTP listener: `GET /metrics` answered with the text format; anything else
/// 404 (another path) or 405 (another method). Connections are served side by side
/// ([`crate::peers`]): an idle or slow scraper delays no other, nor the daemon.
pub fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    crate::peers::serve(listener, LIMITS, Scrapes(metrics), None);
}

struct Scrapes(Arc<Metrics>);

impl crate::peers::Service<TcpStream> for Scrapes {
    fn accepted(&mut self, _: &TcpStream) -> Option<Vec<u8>> {
        None
    }
    fn complete(&self, buf: &[u8]) -> Option<usize> {
        head_len(buf)
    }
    fn request(&mut self, _: u64, req: &[u8]) -> Option<Vec<u8>> {
        Some(answer(req, &self.0))
    }
    fn too_big(&self) -> Vec<u8> {
        response("431 Request Header Fields Too Large", "text/plain", b"")
    }
}

/// The length of the request head at the start of `buf` (up to its blank line), once whole.
pub fn head_len(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a request line asks: `GET /metrics` (a query ignored), another path, another method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Metrics,
    NotFound,
    NotAllowed,
}

/// The route of the request head `head` (any bytes).
pub fn route(head: &[u8]) -> Route {
    let line = String::from_utf8_lossy(head);
    let mut words = line.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    match (method, target.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => Route::Metrics,
        ("GET", _) => Route::NotFound,
        _ => Route::NotAllowed,
    }
}

fn answer(head: &[u8], metrics: &Metrics) -> Vec<u8> {
    match route(head) {
        Route::Metrics => response(
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            &metrics.encode(),
        ),
        Route::NotFound => response("404 Not Found", "text/plain", b"only /metrics\n"),
        Route::NotAllowed => response("405 Method Not Allowed", "text/plain", b"only GET\n"),
    }
}

fn response(status: &str, kind: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Bind the listener of `[metrics] listen`.
pub fn listen(cfg: &MetricsConfig) -> Option<std::io::Result<TcpListener>> {
    cfg.listen.map(TcpListener::bind)
}

/// What to add to an error of the listener or the textfile that a sandbox gives: the
/// shipped isold.service allows no IP socket (EAFNOSUPPORT), and IPAddressDeny and
/// ProtectSystem make a bind or a write fail with EPERM, EACCES or EROFS.
pub fn sandbox_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EAFNOSUPPORT | libc::EPERM | libc::EACCES | libc::EROFS) => {
            " (under isold.service, [metrics] needs the drop-in of isold(8), METRICS: systemctl edit isold)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandboxs_refusal_names_the_drop_in() {
        for errno in [libc::EAFNOSUPPORT, libc::EPERM, libc::EACCES, libc::EROFS] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert!(
                sandbox_hint(&e).contains("drop-in of isold(8), METRICS"),
                "{e}"
            );
        }
        for errno in [libc::EADDRINUSE, libc::ENOSPC] {
            assert_eq!(sandbox_hint(&std::io::Error::from_raw_os_error(errno)), "");
        }
    }

    proptest::proptest! {
        /// Any bytes: the head's end is found or not, never past the bytes, and a route
        /// is given without a panic.
        #[test]
        fn any_bytes_are_routed_without_a_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Some(n) = head_len(&bytes) {
                proptest::prop_assert!(n <= bytes.len());
                proptest::prop_assert!(bytes[..n].ends_with(b"\n\n") || bytes[..n].ends_with(b"\r\n\r\n"));
            }
            let _ = route(&bytes);
        }

        /// A GET of /metrics, with any query and headers, is the metrics; the head ends at
        /// its first blank line, whatever follows.
        #[test]
        fn a_get_of_metrics_is_found_whatever_the_headers(
            query in "[a-z0-9=&]{0,20}",
            headers in proptest::collection::vec("[A-Za-z-]{1,12}: [ -~]{0,30}", 0..6),
            rest in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let mut head = format!("GET /metrics{}{query} HTTP/1.1\r\n", if query.is_empty() { "" } else { "?" });
            for h in &headers {
                head.push_str(h);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            let mut bytes = head.clone().into_bytes();
            bytes.extend_from_slice(&rest);
            proptest::prop_assert_eq!(head_len(&bytes), Some(head.len()));
            proptest::prop_assert_eq!(route(&bytes), Route::Metrics);
            proptest::prop_assert_eq!(route(head.replace("GET", "POST").as_bytes()), Route::NotAllowed);
            proptest::prop_assert_eq!(route(head.replace("/metrics", "/other").as_bytes()), Route::NotFound);
        }
    }
}
