//! AWS event-stream frames (`application/vnd.amazon.eventstream`), the body of Bedrock's
//! `ConverseStream` (smithy.io/2.0/aws/amazon-eventstream.html): a prelude (total length and
//! headers length, big-endian u32s) and its CRC32, the headers (name length u8, name, value
//! type u8 — 7 for a string —, value length u16, value), the payload, and the CRC32 of all
//! that. Only string headers are written: `:event-type` / `:exception-type`,
//! `:content-type`, `:message-type` are all the stream needs.

use bytes::{BufMut, Bytes, BytesMut};

/// Header value type 7: a UTF-8 string with a u16 length.
const STRING: u8 = 7;

/// One frame with these string headers and payload.
///
/// A header name is at most 255 bytes and a value at most 32767: the emulator's names and
/// values are short constants, so longer ones (which would not fit the format) are cut.
pub(super) fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Bytes {
    let mut head = BytesMut::new();
    for (name, value) in headers {
        let name = &name.as_bytes()[..name.len().min(255)];
        let value = &value.as_bytes()[..value.len().min(32_767)];
        head.put_u8(name.len() as u8);
        head.put_slice(name);
        head.put_u8(STRING);
        head.put_u16(value.len() as u16);
        head.put_slice(value);
    }
    let total = 12 + head.len() + payload.len() + 4;
    let mut out = BytesMut::with_capacity(total);
    out.put_u32(total as u32);
    out.put_u32(head.len() as u32);
    let prelude_crc = crc32fast::hash(&out);
    out.put_u32(prelude_crc);
    out.put_slice(&head);
    out.put_slice(payload);
    let message_crc = crc32fast::hash(&out);
    out.put_u32(message_crc);
    out.freeze()
}

/// An event frame: `:event-type` `event_type`, a JSON payload.
pub(super) fn event(event_type: &str, payload: &serde_json::Value) -> Bytes {
    frame(
        &[
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        &serde_json::to_vec(payload).unwrap_or_default(),
    )
}

/// An exception frame: `:exception-type` `exception_type` (the member name of the stream's
/// union, `throttlingException`), a JSON payload `{"message": …}`.
pub(super) fn exception(exception_type: &str, message: &str) -> Bytes {
    frame(
        &[
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        &serde_json::to_vec(&serde_json::json!({ "message": message })).unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two test vectors of AWS's C implementation (github.com/awslabs/aws-c-event-stream,
    /// `test_outgoing_application_data_no_headers_valid` and
    /// `test_outgoing_application_one_compressed_header_pair_valid`): the payload
    /// `{'foo':'bar'}` alone, and with one string header `content-type: application/json`.
    #[test]
    fn encodes_aws_test_vectors() {
        let payload = b"{'foo':'bar'}";
        assert_eq!(
            frame(&[], payload).as_ref(),
            [
                0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x00, 0xfd, 0x52, 0x8c, 0x5a, 0x7b, 0x27,
                0x66, 0x6f, 0x6f, 0x27, 0x3a, 0x27, 0x62, 0x61, 0x72, 0x27, 0x7d, 0xc3, 0x65, 0x39,
                0x36,
            ]
        );
        let mut want = vec![
            0x00, 0x00, 0x00, 0x3D, 0x00, 0x00, 0x00, 0x20, 0x07, 0xFD, 0x83, 0x96,
        ];
        want.push(0x0C);
        want.extend_from_slice(b"content-type");
        want.extend_from_slice(&[0x07, 0x00, 0x10]);
        want.extend_from_slice(b"application/json");
        want.extend_from_slice(payload);
        want.extend_from_slice(&[0x8D, 0x9C, 0x08, 0xB1]);
        let got = frame(&[("content-type", "application/json")], payload);
        assert_eq!(got.as_ref(), want.as_slice());
    }

    #[test]
    fn frames_carry_their_lengths_headers_and_crcs() {
        let f = event(
            "messageStop",
            &serde_json::json!({"stopReason": "end_turn"}),
        );
        let total = u32::from_be_bytes(f[0..4].try_into().unwrap()) as usize;
        let headers = u32::from_be_bytes(f[4..8].try_into().unwrap()) as usize;
        assert_eq!(total, f.len());
        assert_eq!(
            u32::from_be_bytes(f[8..12].try_into().unwrap()),
            crc32fast::hash(&f[..8])
        );
        let crc_at = f.len() - 4;
        assert_eq!(
            u32::from_be_bytes(f[crc_at..].try_into().unwrap()),
            crc32fast::hash(&f[..crc_at])
        );
        let payload = &f[12 + headers..crc_at];
        assert_eq!(payload, br#"{"stopReason":"end_turn"}"#);
        // The first header: `:event-type`, a string, `messageStop`.
        assert_eq!(f[12] as usize, ":event-type".len());
        assert_eq!(&f[13..24], b":event-type");
        assert_eq!(f[24], STRING);
        assert_eq!(u16::from_be_bytes([f[25], f[26]]), 11);
        assert_eq!(&f[27..38], b"messageStop");
    }
}
