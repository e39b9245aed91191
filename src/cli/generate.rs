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
            let mut cmd = super::Cli::command();
            clap_complete::generate(shell, &mut cmd, "nri-align", &mut std::io::stdout());
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

/// Writes `nri-align.8` and `nri-align-SUB.8` for every visible subcommand into `dir`;
/// returns the files written.
pub fn man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let mut cmd = super::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
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
