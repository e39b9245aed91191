use super::*;
use std::time::Duration;

async fn next(w: &mut DirWatch) -> Vec<String> {
    tokio::time::timeout(Duration::from_secs(5), w.changed())
        .await
        .expect("an event")
        .expect("read events")
}

#[tokio::test]
async fn sees_an_atomic_symlink_swap_and_in_place_writes() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path();
    std::fs::create_dir(dir.join("..v1")).expect("mkdir");
    std::fs::write(dir.join("..v1/config.yaml"), "policy: none\n").expect("write");
    std::os::unix::fs::symlink("..v1", dir.join("..data")).expect("link");
    std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.yaml")).expect("link");
    let mut w = DirWatch::new(dir).expect("watch");

    // The kubelet's swap: new dir, new link under a temporary name, renamed over ..data.
    std::fs::create_dir(dir.join("..v2")).expect("mkdir");
    std::fs::write(dir.join("..v2/config.yaml"), "policy: restricted\n").expect("write");
    std::os::unix::fs::symlink("..v2", dir.join("..data_tmp")).expect("link");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
    let mut seen = Vec::new();
    while !seen.iter().any(|n: &String| n == "..data") {
        seen.extend(next(&mut w).await);
    }
    assert!(w.is_watching());

    // An in-place write of a plain file in the directory.
    std::fs::write(dir.join("other.yaml"), "x").expect("write");
    let mut seen = Vec::new();
    while !seen.iter().any(|n: &String| n == "other.yaml") {
        seen.extend(next(&mut w).await);
    }
}

#[tokio::test]
async fn a_removed_directory_ends_the_watch_until_it_is_back() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path().join("conf");
    std::fs::create_dir(&dir).expect("mkdir");
    let mut w = DirWatch::new(&dir).expect("watch");
    std::fs::remove_dir(&dir).expect("rmdir");
    while w.is_watching() {
        next(&mut w).await;
    }
    assert!(w.rewatch().is_err(), "nothing to watch yet");
    std::fs::create_dir(&dir).expect("mkdir again");
    w.rewatch().expect("watched again");
    std::fs::write(dir.join("config.yaml"), "").expect("write");
    assert!(next(&mut w).await.contains(&"config.yaml".to_string()));
}
