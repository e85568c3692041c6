//! A connection waiting for its next request holds no read buffer: the
//! direct path allocates one only when bytes arrive. (A test binary of
//! its own, for the allocator that counts this thread's allocations.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::Bytes;
use futures::FutureExt;
use runnel_wire::connection::{read_request, NextRequest};
use tokio::io::AsyncWriteExt;

struct CountingThisThread;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call goes to the system allocator unchanged; the count
// is a const thread-local that never allocates.
unsafe impl GlobalAlloc for CountingThisThread {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATED.try_with(|a| a.set(a.get() + layout.size()));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingThisThread = CountingThisThread;

fn allocated() -> usize {
    ALLOCATED.with(Cell::get)
}

#[tokio::test(flavor = "current_thread")]
async fn a_connection_waiting_for_a_request_holds_no_buffer() {
    let (mut client, mut server) = tokio::io::duplex(64 << 10);
    let mut reading = Box::pin(read_request(&mut server, Bytes::new()));
    let before = allocated();
    assert!((&mut reading).now_or_never().is_none(), "nothing was sent");
    assert!((&mut reading).now_or_never().is_none(), "nothing was sent");
    let waiting = allocated() - before;
    assert!(
        waiting < 64,
        "{waiting} bytes allocated while waiting for a request"
    );

    // Bytes arrive: the request is read as before.
    let append = b"POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    client.write_all(append).await.unwrap();
    let NextRequest::Plain {
        request,
        keep_alive,
    } = reading.await
    else {
        panic!("not read as a plain request");
    };
    assert!(keep_alive);
    let (head, body) = request.into_parts().unwrap();
    assert_eq!(head.uri(), "/v1/stream/s");
    assert_eq!(body, Bytes::from_static(b"hello"));

    // A request that arrives in pieces larger than one read is still whole.
    let big = vec![b'x'; 20_000];
    let mut request = format!(
        "POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        big.len()
    )
    .into_bytes();
    request.extend_from_slice(&big);
    client.write_all(&request).await.unwrap();
    let NextRequest::Plain { request, .. } = read_request(&mut server, Bytes::new()).await else {
        panic!("not read as a plain request");
    };
    assert_eq!(request.into_parts().unwrap().1.len(), big.len());

    // The peer closes while it waits: gone.
    drop(client);
    assert!(matches!(
        read_request(&mut server, Bytes::new()).await,
        NextRequest::Gone
    ));
}
