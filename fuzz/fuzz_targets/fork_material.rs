//! Fork material: what a fork in one group copies from its source in
//! another (`runnel_core::fork_copy`), as it arrives from a peer. The
//! codec is canonical: what decodes encodes back to exactly the bytes
//! read, and the data carried is as long as the chunks say.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::ForkMaterial;

fuzz_target!(|data: &[u8]| {
    let Ok((material, bytes)) = ForkMaterial::decode(data) else {
        return;
    };
    assert_eq!(material.data_len(), bytes.len() as u64);
    assert_eq!(material.encode(bytes), data, "fork material round-trips");
    let (again, again_bytes) = ForkMaterial::decode(data).expect("decodes again");
    assert_eq!((again, again_bytes), (material, bytes));
});
