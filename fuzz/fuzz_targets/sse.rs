//! A streamed model answer: arbitrary bytes, cut at arbitrary points, are
//! decoded or refused, never a panic, and the text kept never outgrows what
//! was fed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte chooses the cut: how many bytes each read brings.
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let step = usize::from(cut).max(1);
    let mut parser = leasehold::model::StreamParser::new();
    let mut fed = 0usize;
    for chunk in body.chunks(step) {
        fed += chunk.len();
        if parser.feed(chunk).is_err() {
            return;
        }
        assert!(parser.content().len() <= fed);
    }
    let _ = parser.finish();
});
