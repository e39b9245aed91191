//! The `nri-align` binary: parse the command line and hand over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = nri_align::cli::Cli::parse();
    match cli.run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("nri-align: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
