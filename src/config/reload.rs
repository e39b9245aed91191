//! SIGHUP reload: re-reads the configuration file on every hangup and hands each valid one to
//! the plugin; a file that does not parse or validate leaves the previous configuration in force.

use std::path::PathBuf;

use super::Config;

/// Reloads the configuration on every SIGHUP until the process ends. `apply` gets each new
/// configuration that parsed and validated; when it (or parsing) fails the old configuration
/// stays and the reason is logged.
pub fn spawn_reload_on_sighup<F>(path: PathBuf, mut apply: F) -> std::io::Result<()>
where
    F: FnMut(Config) -> Result<(), String> + Send + 'static,
{
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let outcome = Config::load(&path)
                .map_err(|e| e.to_string())
                .and_then(&mut apply);
            match outcome {
                Ok(()) => tracing::info!(config = %path.display(), "configuration reloaded"),
                Err(why) => tracing::warn!(
                    config = %path.display(),
                    "configuration not reloaded, keeping the previous one: {why}"
                ),
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Policy;

    #[tokio::test]
    async fn sighup_applies_a_valid_file_and_keeps_the_old_one_otherwise() {
        let t = tempfile::tempdir().expect("tmp");
        let path = t.path().join("c.yaml");
        std::fs::write(&path, "policy: restricted\n").expect("write");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        spawn_reload_on_sighup(path.clone(), move |c| {
            let _ = tx.send(c.placement.policy);
            Ok(())
        })
        .expect("watch");
        let within = std::time::Duration::from_millis(500);
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).expect("raise");
        assert_eq!(
            tokio::time::timeout(within, rx.recv())
                .await
                .expect("applied"),
            Some(Policy::Restricted)
        );
        std::fs::write(&path, "policy: sometimes\n").expect("write");
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).expect("raise");
        assert!(
            tokio::time::timeout(within, rx.recv()).await.is_err(),
            "a bad file is not applied"
        );
    }
}
