//! CRI client with crictl's command names (skeleton; see issue 2).
fn main() {
    eprintln!("nri-align-crictl: not built yet");
    std::process::exit(2);
}
