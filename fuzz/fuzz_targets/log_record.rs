//! What recovery reads back from a log record: a command entry. What
//! decodes encodes back to exactly the bytes read (the entry codec is
//! canonical; a subscription command's JSON is the one part that is not,
//! and there the encoding must at least decode to the same entry), and
//! decoding the header alone agrees with decoding the whole entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::command::Entry;
use runnel_core::Command;

fuzz_target!(|data: &[u8]| {
    let whole = Entry::decode(data);
    let header = Entry::decode_header(data);
    assert_eq!(
        whole.is_ok(),
        header.is_ok(),
        "header and entry decode alike"
    );
    let Ok(entry) = whole else {
        return;
    };
    let encoded = entry.encode();
    if !matches!(entry.command, Command::Subscription(_)) {
        assert_eq!(encoded, data, "an entry encodes to the bytes it came from");
    }
    assert_eq!(Entry::decode(&encoded).ok(), Some(entry.clone()));
    // The header is the entry without its data, and counts the data.
    let (mut without_data, data_len) = header.expect("decoded above");
    let len = entry.command.body().map_or(0, |b| b.data.len());
    assert_eq!(data_len, len as u64);
    let mut released = entry;
    released.command.release_data();
    without_data.command.release_data();
    assert_eq!(without_data, released);
});
