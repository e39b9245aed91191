//! Generates the PodResources v1 message types from proto/podresources/api.proto with
//! rust-protobuf's pure-Rust parser, so no system protoc is needed.
use std::path::PathBuf;

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let proto_dir = manifest.join("../../proto/podresources");
    let proto = proto_dir.join("api.proto");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("pr");
    std::fs::create_dir_all(&out).expect("create OUT_DIR/pr");

    protobuf_codegen::Codegen::new()
        .pure()
        .include(&proto_dir)
        .input(&proto)
        .out_dir(&out)
        .run_from_script();

    // The generated file opens with inner attributes (`#![...]`, `//!`), which `include!` cannot
    // take inside a module; drop them and let src/proto.rs set the allowances instead.
    let generated = std::fs::read_to_string(out.join("api.rs")).expect("read generated api.rs");
    let cleaned: String = generated
        .lines()
        .filter(|l| !l.starts_with("#![") && !l.starts_with("//!"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(out.join("api_include.rs"), cleaned).expect("write api_include.rs");
    println!("cargo:rerun-if-changed={}", proto.display());
}
