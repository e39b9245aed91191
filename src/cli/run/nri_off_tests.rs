use super::*;
use std::fs;

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tmp");
    for (path, text) in files {
        let p = t.path().join(path);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }
    t
}

#[test]
fn the_runtime_is_told_by_what_it_leaves_on_the_host() {
    let sock = Path::new("/var/run/nri/nri.sock");
    let t = tree(&[("etc/containerd/config.toml", "version = 2\n")]);
    let m = message(sock, t.path());
    assert!(
            m.contains("containerd 1.7: NRI is off by default; set `disable = false` under [plugins.\"io.containerd.nri.v1.nri\"]"),
            "{m}"
        );
    assert!(!m.contains("CRI-O"), "{m}");

    let t = tree(&[("etc/containerd/config.toml", "version = 3\n")]);
    assert_eq!(detect(t.path()), vec![Runtime::Containerd2]);
    assert!(message(sock, t.path()).contains("does not set `disable = true`"));

    let t = tree(&[("usr/bin/crio", "")]);
    let m = message(sock, t.path());
    assert!(
        m.contains("CRI-O: set `enable_nri = true` under [crio.nri]") && !m.contains("containerd"),
        "{m}"
    );

    let t = tree(&[]);
    let m = message(sock, t.path());
    assert!(
        m.starts_with("NRI socket /var/run/nri/nri.sock does not exist")
            && m.contains("containerd 1.7")
            && m.contains("containerd 2.x")
            && m.contains("CRI-O"),
        "{m}"
    );
}
