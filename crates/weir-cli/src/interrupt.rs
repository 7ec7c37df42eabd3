//! Ctrl-C while a statement runs. At the prompt the line editor has the terminal in raw mode
//! and reads Ctrl-C as a key; everywhere else it is SIGINT, counted here so that a live result
//! can detach on it. While the client asks whether to stop a detached pipeline, a second Ctrl-C
//! ends the client at once (the terminal is in its normal mode then: nothing to restore).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static COUNT: AtomicUsize = AtomicUsize::new(0);
static ASKING: AtomicBool = AtomicBool::new(false);

/// The exit status of a client ended by Ctrl-C (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Counts SIGINTs from now on, on a thread of its own.
pub fn install() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let Ok(runtime) = runtime else { return };
    std::thread::spawn(move || {
        runtime.block_on(async {
            while tokio::signal::ctrl_c().await.is_ok() {
                if ASKING.load(Ordering::SeqCst) {
                    eprintln!();
                    std::process::exit(EXIT_INTERRUPTED);
                }
                COUNT.fetch_add(1, Ordering::SeqCst);
            }
        });
    });
}

/// How many times Ctrl-C was pressed so far: a change from an earlier reading is a new press.
pub fn count() -> usize {
    COUNT.load(Ordering::SeqCst)
}

/// While `asking` is set, Ctrl-C exits the client.
pub fn set_asking(asking: bool) {
    ASKING.store(asking, Ordering::SeqCst);
}
