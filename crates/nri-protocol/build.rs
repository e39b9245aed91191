//! Generates the NRI message types and async ttrpc services from `proto/nri/api.proto`
//! with ttrpc-codegen (pure Rust: no protoc needed) into OUT_DIR.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

fn main() -> io::Result<()> {
    let manifest_dir = PathBuf::from(env_var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest_dir.join("../../proto/nri");
    let proto = proto_dir.join("api.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(env_var("OUT_DIR")?).join("nri");
    fs::create_dir_all(&out_dir)?;

    ttrpc_codegen::Codegen::new()
        .out_dir(&out_dir)
        .input(&proto)
        .include(&proto_dir)
        .rust_protobuf()
        .customize(ttrpc_codegen::Customize {
            async_all: true,
            ..Default::default()
        })
        .rust_protobuf_customize(ttrpc_codegen::ProtobufCustomize::default().gen_mod_rs(false))
        .run()?;

    // The generated files start with inner attributes (`#![allow(..)]`) and inner doc
    // comments (`//!`), which `include!` rejects. The allowances are re-applied on the
    // wrapping module in src/generated.rs instead.
    for name in ["api.rs", "api_ttrpc.rs"] {
        strip_inner_attributes(&out_dir.join(name))?;
    }
    Ok(())
}

fn env_var(name: &str) -> io::Result<String> {
    std::env::var(name).map_err(|e| io::Error::other(format!("{name}: {e}")))
}

fn strip_inner_attributes(path: &Path) -> io::Result<()> {
    let text = fs::read_to_string(path)?;
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| {
            let l = line.trim_start();
            !(l.starts_with("#![") || l.starts_with("//!"))
        })
        .collect();
    fs::write(path, kept.join("\n"))
}
