//! Fuzz target on the file loaders: arbitrary bytes as a GGUF file, as a safetensors model
//! directory (with a fixed BERT config), and as an activations file. Any outcome but a panic
//! is fine. Run: `cargo +nightly fuzz run loaders -- -max_total_time=600`
//! (seeds: tiny valid GGUF files from `sinklab::synth::write_gguf`, as `fuzz/mutate_loaders.rs`
//! makes them).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("sinklab-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let g = dir.join("m.gguf");
    if let Ok(mut f) = std::fs::File::create(&g) {
        let _ = f.write_all(data);
    }
    let _ = sinklab::runtime::load(&g);
    let st = dir.join("model.safetensors");
    let _ = std::fs::write(&st, data);
    let _ = std::fs::write(
        dir.join("config.json"),
        r#"{"model_type":"bert","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":4}"#,
    );
    let _ = sinklab::runtime::load(&dir);
    let _ = sinklab::real::activations::analyze_file(&st);
});
