//! The bytes of the gRPC health check: the length-prefixed message framing
//! of gRPC over HTTP/2, and the two protobuf messages of
//! `grpc.health.v1` (`HealthCheckRequest { string service = 1; }`,
//! `HealthCheckResponse { ServingStatus status = 1; }`), written and read by
//! hand: two fields do not need a code generator.

use bytes::{BufMut, Bytes, BytesMut};

use super::outcome::Serving;

/// A framed `HealthCheckRequest` for `service` (empty: the server).
pub fn health_request(service: &str) -> Bytes {
    let mut msg = BytesMut::new();
    if !service.is_empty() {
        msg.put_u8(0x0a); // field 1, length-delimited
        put_varint(&mut msg, service.len() as u64);
        msg.put_slice(service.as_bytes());
    }
    let mut framed = BytesMut::with_capacity(5 + msg.len());
    framed.put_u8(0); // not compressed
    framed.put_u32(msg.len() as u32);
    framed.put_slice(&msg);
    framed.freeze()
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Reads the one framed `HealthCheckResponse` of an answer's body. The
/// error says what is wrong, never what the bytes were.
pub fn health_response(body: &[u8]) -> Result<Serving, &'static str> {
    if body.len() < 5 {
        return Err("the gRPC answer holds no message");
    }
    if body[0] != 0 {
        return Err("the gRPC answer is compressed, though no compression was offered");
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let msg = body
        .get(5..5 + len)
        .ok_or("the gRPC answer's message is cut short")?;
    if body.len() > 5 + len {
        return Err("the gRPC answer holds more than one message");
    }
    let mut status = 0;
    let mut rest = msg;
    while !rest.is_empty() {
        let key = varint(&mut rest)?;
        match (key >> 3, key & 7) {
            (1, 0) => status = varint(&mut rest)?,
            (_, 0) => {
                varint(&mut rest)?;
            }
            (_, 1) => skip(&mut rest, 8)?,
            (_, 2) => {
                let n = varint(&mut rest)?;
                skip(&mut rest, usize::try_from(n).map_err(|_| BAD)?)?
            }
            (_, 5) => skip(&mut rest, 4)?,
            _ => return Err(BAD),
        }
    }
    Ok(match status {
        1 => Serving::Serving,
        2 => Serving::NotServing,
        3 => Serving::ServiceUnknown,
        // 0, and values a newer protocol may add.
        _ => Serving::Unknown,
    })
}

const BAD: &str = "the gRPC answer is not a HealthCheckResponse";

fn varint(buf: &mut &[u8]) -> Result<u64, &'static str> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or(BAD)?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(BAD)
}

fn skip(buf: &mut &[u8], n: usize) -> Result<(), &'static str> {
    *buf = buf.get(n..).ok_or(BAD)?;
    Ok(())
}

/// The name of a gRPC status code (grpc/grpc doc/statuscodes.md).
pub fn status_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES
        .get(code as usize)
        .copied()
        .unwrap_or("an unknown code")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(msg: &[u8]) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        v.extend_from_slice(msg);
        v
    }

    #[test]
    fn a_request_names_its_service_or_nothing() {
        assert_eq!(&health_request("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &health_request("a.B")[..],
            &[0, 0, 0, 0, 5, 0x0a, 3, b'a', b'.', b'B']
        );
        let long = "s".repeat(300);
        let r = health_request(&long);
        // 300 is the two-byte varint ac 02.
        assert_eq!(&r[5..8], &[0x0a, 0xac, 0x02]);
        assert_eq!(r.len(), 5 + 3 + 300);
    }

    #[test]
    fn answers_are_read_whatever_else_they_carry() {
        assert_eq!(health_response(&framed(&[8, 1])), Ok(Serving::Serving));
        assert_eq!(health_response(&framed(&[8, 2])), Ok(Serving::NotServing));
        assert_eq!(
            health_response(&framed(&[8, 3])),
            Ok(Serving::ServiceUnknown)
        );
        // proto3 leaves a zero field out: UNKNOWN.
        assert_eq!(health_response(&framed(&[])), Ok(Serving::Unknown));
        assert_eq!(health_response(&framed(&[8, 9])), Ok(Serving::Unknown));
        // Unknown fields of every wire type are skipped.
        let msg = [
            0x10, 0x96, 0x01, // field 2 varint
            0x19, 1, 2, 3, 4, 5, 6, 7, 8, // field 3 fixed64
            0x22, 2, b'h', b'i', // field 4 bytes
            0x2d, 1, 2, 3, 4, // field 5 fixed32
            8, 1,
        ];
        assert_eq!(health_response(&framed(&msg)), Ok(Serving::Serving));
    }

    #[test]
    fn broken_answers_are_refused_without_a_panic() {
        assert!(health_response(&[]).is_err());
        assert!(
            health_response(&[1, 0, 0, 0, 2, 8, 1]).is_err(),
            "compressed"
        );
        assert!(health_response(&[0, 0, 0, 0, 9, 8, 1]).is_err(), "short");
        let mut two = framed(&[8, 1]);
        two.extend(framed(&[8, 2]));
        assert!(health_response(&two).is_err(), "two messages");
        assert!(health_response(&framed(&[8])).is_err(), "cut varint");
        assert!(
            health_response(&framed(&[
                8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1
            ]))
            .is_err()
        );
        assert!(
            health_response(&framed(&[0x22, 5, 1])).is_err(),
            "cut bytes"
        );
        assert!(health_response(&framed(&[0x0b])).is_err(), "group");
        // Every prefix of every input either parses or errs.
        let msg = framed(&[0x22, 2, b'h', b'i', 8, 1]);
        for n in 0..msg.len() {
            let _ = health_response(&msg[..n]);
        }
        let huge = [0, 0xff, 0xff, 0xff, 0xff];
        assert!(health_response(&huge).is_err());
    }

    #[test]
    fn status_codes_have_their_names() {
        assert_eq!(status_name(0), "OK");
        assert_eq!(status_name(5), "NOT_FOUND");
        assert_eq!(status_name(12), "UNIMPLEMENTED");
        assert_eq!(status_name(16), "UNAUTHENTICATED");
        assert_eq!(status_name(99), "an unknown code");
    }
}
