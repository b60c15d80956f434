//! The SSE parser fed the same bytes whole, in pseudo-random pieces and byte by byte (the
//! events must not depend on the split), then each event into an adapter's stream decoder,
//! as `ChunkStream` does (stop at the end marker or the first error).
//!
//! Input: adapter byte, split-seed byte, line-cap byte, then the event-stream bytes.
#![no_main]

use fuzz_support::{adapters, check_error, Bytes, DIALECTS};
use libfuzzer_sys::fuzz_target;
use llm_failover::provider::{SseEvent, SseParser};

/// Feeds `pieces` then the end-of-stream blank line (as `ChunkStream` does when the body
/// ends); `Err(())` at the first parser error.
fn parse<'a>(
    cap: usize,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> (Result<Vec<SseEvent>, ()>, bool) {
    let mut parser = SseParser::with_max_line(cap);
    let mut events = Vec::new();
    for piece in pieces {
        match parser.feed(piece) {
            Ok(evs) => events.extend(evs),
            Err(e) => {
                assert!(e.is_decode(), "{e}");
                return (Err(()), false);
            }
        }
    }
    let partial = parser.has_partial();
    match parser.feed(b"\n\n") {
        Ok(evs) => events.extend(evs),
        Err(e) => {
            assert!(e.is_decode(), "{e}");
            return (Err(()), partial);
        }
    }
    (Ok(events), partial)
}

/// Pieces of 1..=16 bytes, lengths from a small linear congruential generator.
fn pieces(bytes: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut state = u32::from(seed) | 1;
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let n = (((state >> 16) % 16) as usize + 1).min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let adapter_index = usize::from(input.byte()) % 5;
    let seed = input.byte();
    let cap = 16 + usize::from(input.byte()) * 16;
    let stream = input.rest();

    let (whole, whole_partial) = parse(cap, [stream]);
    let (split, split_partial) = parse(cap, pieces(stream, seed));
    let (bytewise, bytewise_partial) = parse(cap, stream.chunks(1));
    assert_eq!(whole, split, "events depend on how the bytes were split");
    assert_eq!(whole, bytewise, "events depend on how the bytes were split");
    if whole.is_ok() {
        assert_eq!(whole_partial, split_partial);
        assert_eq!(whole_partial, bytewise_partial);
    }

    let Ok(events) = whole else { return };
    let adapter = adapters(DIALECTS[0])[adapter_index].clone();
    let mut decoder = adapter.stream_decoder("m");
    for event in &events {
        if decoder.is_done() {
            break;
        }
        match decoder.decode(event) {
            Ok(_) => {}
            Err(e) => {
                check_error(&e);
                break;
            }
        }
    }
    let _ = decoder.is_done();
});
