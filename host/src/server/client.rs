//! The scheduling inputs a request carries besides its prompt: who sent it
//! (the scheduler's `client-id`) and by when it should be done (its
//! `deadline-us`). `priority` is read with the other options in
//! [`super::protocol`].
//!
//! Body fields: `user` (OpenAI's end-user identifier, a string) and
//! `deadline_ms` (an extension: milliseconds from arrival, an integer).
//! Headers, for gateways that know the caller better than the body does:
//! `x-client-id` (wins over `user`) and `x-deadline-ms` (the earlier of it
//! and `deadline_ms` applies).

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::error::{echo, ApiError};
use super::fields::Fields;

/// Longest client identity accepted, in bytes.
pub const MAX_CLIENT_LEN: usize = 256;
/// Longest deadline accepted: one day.
pub const MAX_DEADLINE_MS: i64 = 86_400_000;

/// Header naming the client on behalf of a gateway.
pub const CLIENT_HEADER: &str = "x-client-id";
/// Header carrying a relative deadline in milliseconds.
pub const DEADLINE_HEADER: &str = "x-deadline-ms";

/// A request's client and deadline, as the engine takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientInfo {
    /// 0 = anonymous; see [`client_id`].
    pub client_id: u64,
    /// Relative to arrival.
    pub deadline: Option<Duration>,
}

/// The scheduler's id for a client identity: the first 8 bytes of its
/// sha256, so equal identities get equal ids across requests and restarts
/// (policies may keep per-client state) without the server keeping a table.
/// The empty identity is anonymous (0); no other identity maps to 0.
pub fn client_id(identity: &str) -> u64 {
    if identity.is_empty() {
        return 0;
    }
    let h = Sha256::digest(identity.as_bytes());
    let id = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
    id.max(1)
}

/// Reads `user` and `deadline_ms` from a request body.
pub fn from_body(f: &Fields) -> Result<ClientInfo, ApiError> {
    let user = f.str("user")?.unwrap_or("");
    if user.len() > MAX_CLIENT_LEN {
        return Err(f.error(
            "user",
            &format!("a string of at most {MAX_CLIENT_LEN} bytes"),
            &Value::String(user.to_string()),
        ));
    }
    let deadline = f
        .int("deadline_ms", 1, MAX_DEADLINE_MS)?
        .map(|ms| Duration::from_millis(ms as u64));
    Ok(ClientInfo {
        client_id: client_id(user),
        deadline,
    })
}

fn header_error(name: &str, want: &str, raw: &[u8]) -> ApiError {
    let shown = Value::String(String::from_utf8_lossy(raw).into_owned());
    ApiError::field(
        name,
        format!("header `{name}` must be {want}, got {}", echo(&shown)),
    )
}

/// Applies the gateway headers on top of what the body said.
pub fn apply_headers(info: &mut ClientInfo, headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(v) = headers.get(CLIENT_HEADER) {
        let want = format!("1 to {MAX_CLIENT_LEN} visible ASCII characters");
        match v.to_str() {
            Ok(s) if !s.is_empty() && s.len() <= MAX_CLIENT_LEN => info.client_id = client_id(s),
            _ => return Err(header_error(CLIENT_HEADER, &want, v.as_bytes())),
        }
    }
    if let Some(v) = headers.get(DEADLINE_HEADER) {
        let want = format!("an integer number of milliseconds between 1 and {MAX_DEADLINE_MS}");
        let ms = v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|ms| (1..=MAX_DEADLINE_MS).contains(ms));
        let Some(ms) = ms else {
            return Err(header_error(DEADLINE_HEADER, &want, v.as_bytes()));
        };
        let d = Duration::from_millis(ms as u64);
        info.deadline = Some(info.deadline.map_or(d, |b| b.min(d)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_fields() {
        let body = json!({"user": "alice", "deadline_ms": 250});
        let info = from_body(&Fields::body(&body).unwrap()).unwrap();
        assert_eq!(info.client_id, client_id("alice"));
        assert_ne!(info.client_id, client_id("bob"));
        assert_ne!(info.client_id, 0);
        assert_eq!(info.deadline, Some(Duration::from_millis(250)));
        let none = from_body(&Fields::body(&json!({})).unwrap()).unwrap();
        assert_eq!(none, ClientInfo::default());
    }

    #[test]
    fn malformed_body_fields_name_the_field_and_echo_the_value() {
        for (body, field, shown) in [
            (json!({"deadline_ms": -5}), "deadline_ms", "-5"),
            (json!({"deadline_ms": "soon"}), "deadline_ms", "\"soon\""),
            (json!({"deadline_ms": 0}), "deadline_ms", "0"),
            (json!({"user": 42}), "user", "42"),
            (json!({"user": "x".repeat(300)}), "user", "xxxx"),
        ] {
            let e = from_body(&Fields::body(&body).unwrap()).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(field) && msg.contains(shown), "{msg}");
            assert_eq!(e.status().as_u16(), 400);
        }
    }

    #[test]
    fn headers_override_identity_and_tighten_the_deadline() {
        let mut info = ClientInfo {
            client_id: client_id("alice"),
            deadline: Some(Duration::from_millis(500)),
        };
        let mut h = HeaderMap::new();
        h.insert(CLIENT_HEADER, "tenant-7".parse().unwrap());
        h.insert(DEADLINE_HEADER, "200".parse().unwrap());
        apply_headers(&mut info, &h).unwrap();
        assert_eq!(info.client_id, client_id("tenant-7"));
        assert_eq!(info.deadline, Some(Duration::from_millis(200)));
        h.insert(DEADLINE_HEADER, "900".parse().unwrap());
        apply_headers(&mut info, &h).unwrap();
        assert_eq!(info.deadline, Some(Duration::from_millis(200)));

        h.insert(DEADLINE_HEADER, "tomorrow".parse().unwrap());
        let msg = apply_headers(&mut info, &h).unwrap_err().to_string();
        assert!(
            msg.contains(DEADLINE_HEADER) && msg.contains("tomorrow"),
            "{msg}"
        );
        let mut h = HeaderMap::new();
        h.insert(CLIENT_HEADER, "".parse().unwrap());
        let msg = apply_headers(&mut info, &h).unwrap_err().to_string();
        assert!(msg.contains(CLIENT_HEADER), "{msg}");
    }
}
