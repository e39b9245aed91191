//! The `nri-align` binary: parse the command line and hand over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    // A runtime launching a pre-installed plugin runs it without arguments, with the connected
    // socket in NRI_PLUGIN_SOCKET: that means `run`.
    let launched =
        std::env::var_os("NRI_PLUGIN_SOCKET").is_some() && std::env::args_os().len() == 1;
    let cli = if launched {
        nri_align::cli::Cli::parse_from(["nri-align", "run"])
    } else {
        nri_align::cli::Cli::parse()
    };
    if !matches!(cli.command, nri_align::cli::Command::Run(_)) {
        nri_align::cli::default_sigpipe();
    }
    match cli.run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("nri-align: {}", nri_align::cli::render_error(&err));
            std::process::ExitCode::from(nri_align::cli::exit_code(&err))
        }
    }
}
