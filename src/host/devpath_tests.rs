use std::os::unix::fs::symlink;

use super::*;

#[test]
fn links_are_followed_within_dev_only() {
    let t = tempfile::tempdir().expect("tmp");
    let dev = t.path().join("dev");
    std::fs::create_dir_all(dev.join("dri/by-path")).expect("mkdir");
    std::fs::write(dev.join("renderD128"), "").expect("write");
    symlink("../../renderD128", dev.join("dri/by-path/pci-render")).expect("link");
    symlink("/dev/renderD128", dev.join("abs")).expect("link");
    symlink("dri", dev.join("alias")).expect("link");
    symlink("/etc/passwd", dev.join("out-abs")).expect("link");
    symlink("../etc", dev.join("out-up")).expect("link");
    symlink("loop", dev.join("loop")).expect("link");
    let real = dev.join("renderD128");
    assert_eq!(resolve(&dev, "dri/by-path/pci-render"), Some(real.clone()));
    assert_eq!(resolve(&dev, "abs"), Some(real));
    assert_eq!(
        resolve(&dev, "alias/by-path"),
        Some(dev.join("dri/by-path"))
    );
    for rel in [
        "out-abs", "out-up/x", "loop", "missing", "../etc", "a//b", "./x", "",
    ] {
        assert_eq!(resolve(&dev, rel), None, "{rel}");
    }
}
