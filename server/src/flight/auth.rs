//! Flight handshake under trust authentication.
//!
//! Weir's Flight endpoint trusts its network (like pgwire's default `trust`
//! on localhost): any credentials are accepted and every call runs as user
//! `weir`. Clients that authenticate anyway get what they expect: a `Basic`
//! header is decoded (a malformed one is rejected with `InvalidArgument`),
//! and the response carries a bearer token both as payload and as the
//! `authorization` header. The token is not checked on later calls.

use std::pin::Pin;

use arrow_flight::HandshakeResponse;
use futures::Stream;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Response, Status};

use super::status::bad_request;

/// The token handed out by the handshake.
const TRUST_TOKEN: &str = "weir-trust";

pub(crate) type HandshakeStream =
    Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>;

/// Answers a handshake whose request headers are `metadata`.
pub(crate) fn handshake(metadata: &MetadataMap) -> Result<Response<HandshakeStream>, Status> {
    if let Some(user) = basic_user(metadata)? {
        tracing::debug!(%user, "Flight handshake (trust auth)");
    }
    let output = futures::stream::iter([Ok(HandshakeResponse {
        protocol_version: 0,
        payload: TRUST_TOKEN.into(),
    })]);
    let mut response: Response<HandshakeStream> = Response::new(Box::pin(output));
    response.metadata_mut().insert(
        "authorization",
        MetadataValue::from_static("Bearer weir-trust"),
    );
    Ok(response)
}

/// The user named by a `Basic` authorization header, `None` without one (or
/// with another scheme, which trust auth accepts as is).
fn basic_user(metadata: &MetadataMap) -> Result<Option<String>, Status> {
    let Some(value) = metadata.get("authorization") else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| bad_request("authorization header is not ASCII"))?;
    let Some(encoded) = strip_prefix_ignore_case(value.trim(), "basic ") else {
        return Ok(None);
    };
    let decoded = decode_base64(encoded.trim())
        .ok_or_else(|| bad_request("malformed Basic authorization header (bad base64)"))?;
    let text = String::from_utf8(decoded)
        .map_err(|_| bad_request("malformed Basic authorization header (not UTF-8)"))?;
    let (user, _password) = text
        .split_once(':')
        .ok_or_else(|| bad_request("malformed Basic authorization header (no ':')"))?;
    Ok(Some(user.to_string()))
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Standard base64 with optional padding; `None` on any invalid input.
fn decode_base64(input: &str) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let trimmed = input.trim_end_matches('=');
    if input.len() - trimmed.len() > 2 || trimmed.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(trimmed.len() * 3 / 4);
    for chunk in trimmed.as_bytes().chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= sextet(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_standard_alphabet() {
        assert_eq!(
            decode_base64("d2Vpcjp3ZWly").as_deref(),
            Some(&b"weir:weir"[..])
        );
        assert_eq!(decode_base64("YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(decode_base64("YWI=").as_deref(), Some(&b"ab"[..]));
        assert_eq!(decode_base64("YWI").as_deref(), Some(&b"ab"[..]));
        assert_eq!(decode_base64("").as_deref(), Some(&b""[..]));
        assert_eq!(decode_base64("Y"), None);
        assert_eq!(decode_base64("a*b="), None);
    }

    fn headers(auth: Option<&'static str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(a) = auth {
            m.insert("authorization", MetadataValue::from_static(a));
        }
        m
    }

    #[test]
    fn basic_header_is_parsed_and_others_are_trusted() {
        assert_eq!(basic_user(&headers(None)).ok(), Some(None));
        assert_eq!(
            basic_user(&headers(Some("Basic d2Vpcjp3ZWly"))).ok(),
            Some(Some("weir".to_string()))
        );
        assert_eq!(basic_user(&headers(Some("Bearer abc"))).ok(), Some(None));
        assert!(basic_user(&headers(Some("Basic !!!"))).is_err());
        assert!(
            basic_user(&headers(Some("Basic d2Vpcg=="))).is_err(),
            "no colon"
        );
    }

    #[test]
    fn handshake_returns_bearer_token() {
        let response = handshake(&headers(Some("Basic d2Vpcjp3ZWly"))).expect("accepted");
        assert_eq!(
            response
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer weir-trust")
        );
    }
}
