//! nri-align-crictl: CRI client with crictl's command names, for nri-align's tests and demo.
use clap::Parser;

fn main() {
    let cli = cri_client::cli::Cli::parse();
    match cri_client::commands::run(cli) {
        Ok(code) => std::process::exit(code),
        // A closed pipe (`... | head`) is the reader's choice, not a failure worth a message.
        Err(e) if is_broken_pipe(&e) => std::process::exit(0),
        Err(e) => {
            eprintln!("nri-align-crictl: {e:#}");
            std::process::exit(1);
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
