//! Generates the Connect API's message types and service trait from
//! `proto/spine/v1/memory.proto`, compiling the schema with protox (pure Rust: no `protoc`
//! to install) into a descriptor set that connectrpc-build reads.
//!
//! The descriptor set is written into `OUT_DIR` by this script itself, so it is not an input:
//! declared as one (connectrpc-build's own `rerun-if-changed`), it is always newer than the
//! script's last run and cargo re-ran the script, recompiling this crate and everything above
//! it, on every build. The proto file is the one input; the generator's own environment
//! variable is declared again here.

use std::path::PathBuf;

fn main() {
    let proto_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = "spine/v1/memory.proto";
    println!("cargo:rerun-if-changed={}", proto_root.join(file).display());
    let mut compiler = protox::Compiler::new([&proto_root]).expect("the proto include directory");
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files([file]).unwrap_or_else(|e| panic!("compiling {file}: {e}"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let descriptors = out.join("spine.fds.bin");
    std::fs::write(&descriptors, compiler.encode_file_descriptor_set())
        .expect("writing the descriptor set");
    println!("cargo:rerun-if-env-changed=BUFFA_ELEMENT_MEMORY_LIMIT");
    connectrpc_build::Config::new()
        .emit_rerun_directives(false)
        .descriptor_set(&descriptors)
        .files(&[file])
        .include_file("_connectrpc.rs")
        .compile()
        .expect("generating the Connect code");
}
