//! The accept loop: every connection is bounded in time and in number.
//!
//! `axum::serve` sets no timeouts, so a client that sends half a request head
//! (or nothing at all after its last request) held a descriptor forever, and a
//! few hundred of them made the server unreachable. Here:
//! - a connection must deliver a complete request head within
//!   [`HttpLimits::header_timeout`] of the server starting to wait for one:
//!   that bounds both a slow head and an idle keep-alive connection (hyper
//!   starts the same timer when a kept-alive connection goes idle);
//! - a request body must arrive within [`HttpLimits::body_timeout`]
//!   (`server::body`);
//! - at most [`HttpLimits::max_connections`] connections are open at once;
//!   beyond that a connection is answered `503` and closed, with a warning
//!   in the log (at most one line per second, with the count refused);
//! - the soft descriptor limit is raised to the hard one at start
//!   ([`raise_fd_limit`]) and the connection cap kept below it.
//!
//! The limits are settings (`http_header_timeout_s`, `http_body_timeout_s`,
//! `max_connections`, see `crate::config`; tests shorten them); the defaults
//! suit a server behind nothing.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower_service::Service;

use crate::config::Config;

/// Time and count bounds on client connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest wait for a complete request head (also the idle keep-alive
    /// timeout: the wait starts when a connection is ready for a request).
    pub header_timeout: Duration,
    /// Longest time a request body may take to arrive.
    pub body_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits::from_config(&Config::default())
    }
}

impl HttpLimits {
    /// The limits `cfg` sets (`http_header_timeout_s`, `http_body_timeout_s`,
    /// `max_connections`; checked when the configuration was built).
    pub fn from_config(cfg: &Config) -> Self {
        HttpLimits {
            header_timeout: Duration::from_secs_f64(cfg.http_header_timeout_s),
            body_timeout: Duration::from_secs_f64(cfg.http_body_timeout_s),
            max_connections: cfg.max_connections as usize,
        }
    }
}

/// Descriptors kept free for the model files, plugins, logs and the accept
/// loop itself when the connection cap is derived from the descriptor limit.
const RESERVED_FDS: u64 = 64;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (where the OS allows)
/// and returns the soft limit now in force, or `None` if it is unknown.
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
            return None;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
                tracing::info!(
                    from = r.rlim_cur,
                    to = r.rlim_max,
                    "raised the open-file limit"
                );
                r.rlim_cur = r.rlim_max;
            }
        }
        Some(r.rlim_cur)
    }
    #[cfg(not(unix))]
    None
}

/// The connection cap actually used: the configured one, kept below the
/// descriptor limit so accepting never runs the process out of descriptors.
pub fn effective_cap(configured: usize, fd_limit: Option<u64>) -> usize {
    match fd_limit {
        Some(l) => configured.min(l.saturating_sub(RESERVED_FDS).max(1) as usize),
        None => configured,
    }
}

/// The answer to a connection over the cap; it is written without reading
/// the request, then the connection is closed.
const OVER_CAP_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: 114\r\n\r\n\
{\"error\":{\"message\":\"server has too many open connections\",\"type\":\"service_unavailable\",\"param\":null,\"code\":null}}";

/// Counts connections refused over the cap and logs at most once a second.
struct CapLog {
    refused: AtomicU64,
    last: parking_lot::Mutex<Option<Instant>>,
}

impl CapLog {
    fn refused(&self, cap: usize, peer: SocketAddr) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.last.lock();
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            *last = Some(Instant::now());
            tracing::warn!(
                cap,
                refused_total = n,
                %peer,
                "connection cap reached: {cap} connections open; new ones get 503 until some close \
                 (--max-connections)"
            );
        }
    }
}

/// Accepts connections until `shutdown` flips to `true`, then stops
/// accepting, asks every open connection to finish its in-flight request and
/// close, and returns once all of them have.
pub async fn accept_loop(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let cap = limits.max_connections;
    let permits = Arc::new(Semaphore::new(cap));
    let caplog = Arc::new(CapLog {
        refused: AtomicU64::new(0),
        last: parking_lot::Mutex::new(None),
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            caplog.refused(cap, peer);
            refuse(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let builder = builder.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let mut app = app.clone();
                async move { Ok::<_, Infallible>(app.call(req).await.unwrap_or_else(|e| match e {})) }
            });
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => log_conn_end(r, peer),
                _ = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    log_conn_end(conn.await, peer);
                }
            }
        });
    }
    drop(listener);
    // Every connection task holds one permit: all permits back means all
    // connections are closed.
    let _ = permits.acquire_many(cap as u32).await;
}

/// Resolves once shutdown is signalled (or its sender is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Writes the over-cap 503 if the socket takes it at once, then closes.
fn refuse(stream: TcpStream) {
    let _ = stream.try_write(OVER_CAP_RESPONSE);
}

fn log_conn_end(r: Result<(), hyper::Error>, peer: SocketAddr) {
    if let Err(e) = r {
        if e.is_timeout() {
            tracing::debug!(%peer, "closed a connection that sent no complete request head in time");
        } else {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// Serves `app` on `listener` until `done` resolves, one request per
/// connection (no keep-alive), then stops accepting and lets the connections
/// it accepted answer their request. The loading phase runs this: connections
/// still in the socket's backlog at the handover go to the full server, and
/// none is closed before its request is answered (a graceful shutdown of a
/// keep-alive server closes a just-accepted connection unanswered, which a
/// client sees as a reset).
pub async fn serve_until(listener: TcpListener, app: Router, done: impl Future<Output = ()>) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(5))
        .keep_alive(false);
    let builder = Arc::new(builder);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(done);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut done => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let builder = builder.clone();
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let mut app = app.clone();
                async move { Ok::<_, Infallible>(app.call(req).await.unwrap_or_else(|e| match e {})) }
            });
            log_conn_end(builder.serve_connection(TokioIo::new(stream), svc).await, peer);
        });
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_settings() {
        let env = crate::config::ConfigLayer::from_vars([
            (
                "MINISGL_HTTP_HEADER_TIMEOUT_S".to_string(),
                "0.5".to_string(),
            ),
            ("MINISGL_MAX_CONNECTIONS".to_string(), "7".to_string()),
        ])
        .unwrap();
        let l = HttpLimits::from_config(&Config::from_layers([env]).unwrap());
        assert_eq!(l.header_timeout, Duration::from_millis(500));
        assert_eq!(l.body_timeout, Duration::from_secs(30));
        assert_eq!(l.max_connections, 7);
        let e = crate::config::ConfigLayer::from_vars([(
            "MINISGL_HTTP_BODY_TIMEOUT_S".to_string(),
            "soon".to_string(),
        )])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("MINISGL_HTTP_BODY_TIMEOUT_S") && e.contains("soon"),
            "{e}"
        );
    }

    #[test]
    fn cap_stays_below_descriptor_limit() {
        assert_eq!(effective_cap(4096, Some(256)), 192);
        assert_eq!(effective_cap(100, Some(1 << 20)), 100);
        assert_eq!(effective_cap(100, None), 100);
        assert_eq!(effective_cap(100, Some(10)), 1);
    }

    #[test]
    fn over_cap_response_length_matches() {
        let s = std::str::from_utf8(OVER_CAP_RESPONSE).unwrap();
        let (head, body) = s.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{}",
            body.len()
        );
        serde_json::from_str::<serde_json::Value>(body).unwrap();
    }
}
