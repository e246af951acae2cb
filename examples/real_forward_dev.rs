//! The forward bench of `benches/real_forward.rs` in the dev profile (deps at opt-level 3),
//! for when a release build of the whole tree is too slow: `cargo run --example real_forward_dev`.
#[path = "../benches/real_forward.rs"]
mod bench;

fn main() {
    bench::main();
}
