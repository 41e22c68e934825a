//! Reading request bodies with a deadline and a size bound that clients can
//! actually observe.
//!
//! Before this layer a body over [`MAX_BODY_BYTES`] got its `413` written and
//! the connection closed with the rest of the body unread, so the kernel
//! reset the connection and most clients (urllib, aiohttp, curl) saw the
//! reset instead of the status. Now the excess is read and thrown away, up to
//! [`DRAIN_BYTES`] more and within the body deadline, before the `413` goes
//! out with `Connection: close`; a client that sends `Expect: 100-continue`
//! with an oversized `Content-Length` is refused before it sends anything.
//! A body that does not arrive within [`HttpLimits::body_timeout`] gets
//! `408` and the connection is closed (a half-sent body used to hold it
//! forever).
//!
//! [`HttpLimits::body_timeout`]: super::conn::HttpLimits

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::error::ApiError;
use super::MAX_BODY_BYTES;

/// Bytes read and discarded past [`MAX_BODY_BYTES`] so the client can finish
/// sending and read the `413`; a larger excess gets the `413` with the rest
/// unread (such a client may see a reset).
pub const DRAIN_BYTES: u64 = 32 << 20;

/// Buffers the request body under the size bound and the deadline, then
/// hands the request on with the buffered body.
pub async fn bound_body(body_timeout: Duration, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let limit = MAX_BODY_BYTES as u64;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    let expects_continue = parts
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if let Some(n) = declared.filter(|&n| n > limit) {
        if expects_continue {
            // The client waits for `100 Continue` before sending: answer now
            // and it never sends the body.
            return too_large(n);
        }
    }
    let deadline = tokio::time::Instant::now() + body_timeout;
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut total: u64 = 0;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) if total > limit => return too_large(total),
            Err(_) => {
                return ApiError::RequestTimeout(format!(
                    "the request body did not arrive within {:.1} s ({total} bytes received{})",
                    body_timeout.as_secs_f64(),
                    declared.map(|n| format!(" of {n}")).unwrap_or_default()
                ))
                .into_response()
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return ApiError::MalformedJson(format!("cannot read the request body: {e}"))
                    .into_response()
            }
            Ok(Some(Ok(chunk))) => {
                total += chunk.len() as u64;
                if total <= limit {
                    buf.extend_from_slice(&chunk);
                } else {
                    buf = Vec::new();
                    if total > limit + DRAIN_BYTES {
                        break;
                    }
                }
            }
        }
    }
    if total > limit {
        return too_large(declared.unwrap_or(total).max(total));
    }
    next.run(Request::from_parts(parts, Body::from(Bytes::from(buf))))
        .await
}

fn too_large(size: u64) -> Response {
    ApiError::PayloadTooLarge(format!(
        "the body has at least {size} bytes; the limit is {MAX_BODY_BYTES} bytes"
    ))
    .into_response()
}
