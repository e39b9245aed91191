//! `nri-align generate` (hidden): shell completions and man pages, both generated from the
//! clap definition of the command line, so they can never disagree with `--help`.
//! `hack/release-assets` writes them into the release tree.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;

/// Arguments of `nri-align generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// What to generate.
    #[command(subcommand)]
    pub what: What,
}

/// What `generate` writes.
#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Print the completion script of SHELL on stdout.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (section 8: `nri-align.8` and one per subcommand) into DIR.
    Man {
        /// Output directory (created when missing).
        dir: PathBuf,
    },
}

/// Runs `nri-align generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    match args.what {
        What::Completions { shell } => {
            use std::io::Write;
            std::io::stdout().write_all(&completions(shell))?;
            Ok(())
        }
        What::Man { dir } => {
            for page in man_pages(&dir)? {
                println!("{}", page.display());
            }
            Ok(())
        }
    }
}

/// The completion script of `shell`.
///
/// clap_complete's bash script for a binary whose name has a hyphen dispatches to
/// `nri__align__subcmd__…` but names its cases `nri__subcmd__align__subcmd__…`
/// (clap-rs/clap#6421), so nothing past the first word completed: the cases are renamed to
/// what the dispatch sets.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "nri-align", &mut out);
    if shell != clap_complete::Shell::Bash {
        return out;
    }
    String::from_utf8_lossy(&out)
        .replace("nri__subcmd__align", "nri__align")
        .into_bytes()
}

/// Writes `nri-align.8` and a page for every visible subcommand, nested ones included
/// (`nri-align-config.8`, `nri-align-config-check.8`), into `dir`: each page's list of
/// subcommands names pages that exist. Returns the files written.
pub fn man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let mut cmd = super::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = vec![cmd.clone()];
    let mut next: Vec<clap::Command> = visible_subcommands(&cmd);
    while let Some(sub) = next.pop() {
        next.extend(visible_subcommands(&sub));
        pages.push(sub);
    }
    let mut written = Vec::new();
    for page in pages {
        let man = clap_mangen::Man::new(page)
            .section("8")
            .manual("nri-align")
            .source(format!("nri-align {}", super::VERSION_LINE));
        let path = dir.join(man.get_filename());
        let mut out = Vec::new();
        man.render(&mut out)?;
        std::fs::write(&path, out).with_context(|| format!("write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The subcommands of `cmd` a man page is written for (not hidden, not `help`).
fn visible_subcommands(cmd: &clap::Command) -> Vec<clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .cloned()
        .collect()
}
