use super::*;
use clap::CommandFactory;

/// Every subcommand and every argument says what it is for in `--help` (and so in the man
/// pages and completions generated from the same definition).
#[test]
fn every_subcommand_and_argument_has_help() {
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        let here = format!("{path} {}", cmd.get_name()).trim().to_string();
        if cmd.get_about().is_none() {
            missing.push(format!("{here}: no about"));
        }
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{here} {id}: no help"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &here, missing);
        }
    }
    let cmd = Cli::command();
    cmd.clone().debug_assert();
    let mut missing = Vec::new();
    walk(&cmd, "", &mut missing);
    assert!(missing.is_empty(), "{missing:#?}");
    assert!(cmd.get_subcommands().count() >= 6);
}

#[test]
fn version_names_the_revision() {
    let cmd = Cli::command();
    let version = cmd.get_version().expect("version");
    let revision = env!("NRI_ALIGN_GIT_REVISION");
    assert!(!revision.is_empty());
    assert!(version.ends_with(&format!("+{revision}")), "{version}");
}

#[test]
fn errors_say_each_cause_once() {
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
    #[derive(Debug, thiserror::Error)]
    #[error("open /x: {source}")]
    struct Open {
        source: std::io::Error,
    }
    let err = anyhow::Error::new(Open { source: io }).context("reading state");
    assert_eq!(
        render_error(&err),
        "reading state: open /x: No such file or directory"
    );
    let exit = anyhow::Error::new(Exit {
        code: 2,
        message: "could not check".into(),
    });
    assert_eq!((exit_code(&exit), exit_code(&err)), (2, 1));
}
