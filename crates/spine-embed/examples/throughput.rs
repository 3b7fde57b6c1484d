//! Measures load time and embedding throughput of the built-in model:
//! `cargo run -p spine-embed --example throughput [--release]`.

use std::time::Instant;

use spine_embed::{BuiltinEmbedder, Embedder, default_model_dir};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    spine_embed::configure_threads();
    let started = Instant::now();
    let model = BuiltinEmbedder::load(&default_model_dir())?;
    println!("load: {:.0} ms", started.elapsed().as_secs_f64() * 1e3);

    let sentences: Vec<String> = (0..200)
        .map(|i| {
            format!("Note {i}: the deploy of service {} failed because the disk was full", i % 7)
        })
        .collect();
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    model.embed(&refs[..4])?; // warm up

    let started = Instant::now();
    for s in &refs {
        model.embed(&[s])?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "one at a time: {:.1} sentences/s ({:.2} ms each)",
        refs.len() as f64 / secs,
        secs * 1e3 / refs.len() as f64
    );

    let started = Instant::now();
    model.embed(&refs)?;
    let secs = started.elapsed().as_secs_f64();
    println!("batched (32 per pass): {:.1} sentences/s", refs.len() as f64 / secs);
    Ok(())
}
