//! Signing as the Standard Webhooks specification says: the signature of a
//! message is `v1,` then the base64 of the HMAC-SHA256, keyed by the
//! receiver's secret, of `{webhook-id}.{webhook-timestamp}.{body}`; the
//! three go in the `webhook-id`, `webhook-timestamp` (Unix seconds) and
//! `webhook-signature` headers. Each attempt is signed at its own time, so
//! a receiver that refuses old timestamps accepts a late retry.

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::WebhookSecret;

/// The header naming the message: the same on every attempt.
pub const ID_HEADER: &str = "webhook-id";
/// The header with the attempt's time, in Unix seconds.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// The header with the signature.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// The `webhook-signature` value of `body` sent as message `id` at
/// `timestamp_s`.
pub fn sign(secret: &WebhookSecret, id: &str, timestamp_s: u64, body: &[u8]) -> String {
    // A key of any length is accepted by HMAC; the secret's is checked.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.key())
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specifications_example_is_signed_as_it_says() {
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = sign(
            &secret,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }
}
