//! The `runnel` binary: everything it does is in the library (`runnel::run`).

fn main() -> std::process::ExitCode {
    runnel::run()
}
