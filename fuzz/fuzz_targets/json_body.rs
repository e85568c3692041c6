//! JSON request bodies: validation and one level of array flattening, then
//! rendering the stored messages back as one array, which must be valid
//! JSON holding the same messages.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::json::{frame_json_body, render_json_array};

fuzz_target!(|data: &[u8]| {
    for allow_empty in [false, true] {
        if let Ok(framed) = frame_json_body(data, allow_empty) {
            let rendered = render_json_array(&framed.data);
            assert_eq!(rendered.first(), Some(&b'['));
            assert_eq!(rendered.last(), Some(&b']'));
            // Framing the rendering again gives the same messages.
            let again = frame_json_body(&rendered, true).expect("a rendering frames again");
            assert_eq!(again.data, framed.data);
        }
    }
});
