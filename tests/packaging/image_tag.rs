//! A checkout deploys what it builds. The image tag is the version `nri-align --version` says
//! (hack/lib.sh `image_tag`: a release's version alone, any other build's whole version); the
//! manifests of packaging/kubernetes name the release of that version (`release_line`), so a
//! release's manifests render exactly its image; and the kustomization hack/build-image writes
//! beside the image it built renders that image in every nri-align container, the components'
//! too. Each is checked on what `kubectl kustomize` renders, against this build's `--version`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};
use test_support::e2e::daemonset::{kustomize, load_one, render};
use test_support::e2e::repo_root;

/// FUNCTION of hack/lib.sh run with `args`.
fn lib(function: &str, args: &[&str]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg("source \"$1/hack/lib.sh\" && \"$2\" \"${@:3}\"")
        .arg("lib")
        .arg(repo_root())
        .arg(function)
        .args(args)
        .output()
        .expect("run bash")
}

/// The one line FUNCTION prints, which must succeed.
fn lib_line(function: &str, args: &[&str]) -> String {
    let out = lib(function, args);
    assert!(
        out.status.success(),
        "{function} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What this build's `nri-align --version` says, without the name.
fn this_version() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .arg("--version")
        .output()
        .expect("nri-align --version");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    line.strip_prefix("nri-align ")
        .expect("version line")
        .to_string()
}

/// The image of every container of every DaemonSet among `objects`, by DaemonSet name.
fn images(objects: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ds in objects.iter().filter(|o| o["kind"] == "DaemonSet") {
        let name = ds["metadata"]["name"].as_str().unwrap_or_default();
        let containers = ds["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers");
        for c in containers {
            let image = c["image"].as_str().expect("image").to_string();
            out.push((name.to_string(), image));
        }
    }
    out
}

fn oci_tag(t: &str) -> bool {
    t.len() <= 128
        && t.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// The image tag is the version: this build's whole version (`+` written `_`, the only
/// character of a semver an OCI tag refuses), and for a release the version alone.
#[test]
fn the_image_tag_is_the_version() {
    let version = this_version();
    let (core, revision) = version.split_once('+').expect("build metadata");
    let this = lib_line("image_tag", &[&version]);
    assert!(oci_tag(&this), "{this}");
    if core.contains('-') {
        // Between releases: version and commit, so another revision is another tag.
        assert_eq!(this, format!("{core}_{revision}"));
    } else {
        assert_eq!(this, core);
    }
    assert_eq!(lib_line("image_tag", &["0.4.0+0123abcd4567"]), "0.4.0");
    assert_eq!(
        lib_line("image_tag", &["0.4.0-dev+0123abcd4567-dirty"]),
        "0.4.0-dev_0123abcd4567-dirty"
    );
    assert_eq!(
        lib_line("release_line", &["0.4.0-dev+0123abcd4567"]),
        "0.4.0"
    );
    assert_eq!(lib_line("release_line", &["0.4.0+0123abcd4567"]), "0.4.0");
    // A version no tag can carry is refused, not mangled.
    assert!(!lib("image_tag", &["0.4.0-dev+a b"]).status.success());
}

/// The manifests name the release this checkout's binary belongs to, in the kustomization's
/// `images:` (which sets the rendered tag) and in the DaemonSet's file (which an overlay adding
/// components/gpu renders as it is): a release's manifests deploy exactly that release's image,
/// and manifests left at an older release than the code fail here.
#[test]
fn the_manifests_name_the_release_of_this_version() {
    let version = this_version();
    let release = lib_line("release_line", &[&version]);
    let want = format!("localhost/nri-align:{release}");
    if !version.split('+').next().unwrap_or_default().contains('-') {
        // A release build: the manifests' image is the one it is tagged with.
        assert_eq!(
            format!("localhost/nri-align:{}", lib_line("image_tag", &[&version])),
            want
        );
    }
    let k = load_one("kustomization.yaml", "Kustomization").expect("kustomization");
    assert_eq!(
        k["images"],
        json!([{"name": "localhost/nri-align", "newTag": release}]),
        "packaging/kubernetes/kustomization.yaml is not for nri-align {version}"
    );
    let file = load_one("daemonset/daemonset.yaml", "DaemonSet").expect("daemonset");
    assert_eq!(
        file["spec"]["template"]["spec"]["containers"][0]["image"],
        json!(want),
        "daemonset/daemonset.yaml is not for nri-align {version}"
    );
    let Some(plain) = render(&[]).expect("kubectl kustomize") else {
        test_support::skip::skip(
            "the_manifests_name_the_release_of_this_version",
            "kubectl not installed: the rendered image not compared",
        );
        return;
    };
    let gpu = render(&["components/gpu"])
        .expect("kubectl kustomize")
        .expect("rendered");
    let got = [images(&plain), images(&gpu)].concat();
    assert_eq!(got.len(), 3, "{got:?}");
    for (ds, image) in got {
        assert_eq!(image, want, "DaemonSet {ds} renders another image");
    }
}

/// write_deploy_kustomization DIR REF COMPONENT... (what hack/build-image runs after building
/// REF) rendered by `kubectl kustomize DIR`: exactly REF in every nri-align container.
fn deploy(dir: &Path, reference: &str, components: &[&str]) -> Option<Vec<(String, String)>> {
    let mut args = vec![dir.to_str().expect("utf-8 path"), reference];
    args.extend_from_slice(components);
    let out = lib("write_deploy_kustomization", &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kustomize(dir)
        .expect("kubectl kustomize")
        .map(|objects| images(&objects))
}

/// The kustomization hack/build-image writes deploys the image it built, tagged by this
/// build's `--version`, with and without components, under a registry's name too.
#[test]
fn the_kustomization_hack_build_image_writes_deploys_the_image_it_built() {
    let version = this_version();
    let built = format!("localhost/nri-align:{}", lib_line("image_tag", &[&version]));
    let scratch = tempfile::tempdir().expect("tmp");
    let dir = scratch.path().join("kubernetes");
    for (reference, components, daemonsets) in [
        (built.as_str(), &[][..], 1),
        (built.as_str(), &["gpu", "nrt-crd", "monitoring"][..], 2),
        ("registry.example:5000/ops/nri-align:0.4.0", &["gpu"][..], 2),
    ] {
        let Some(got) = deploy(&dir, reference, components) else {
            test_support::skip::skip(
                "the_kustomization_hack_build_image_writes_deploys_the_image_it_built",
                "kubectl not installed: the deploy kustomization not rendered",
            );
            return;
        };
        assert_eq!(got.len(), daemonsets, "{components:?}: {got:?}");
        for (ds, image) in got {
            assert_eq!(image, reference, "{components:?}: DaemonSet {ds}");
        }
    }
    // hack/build-image checks the same names before it builds: a misspelt component or a
    // reference without a tag writes nothing.
    let other = scratch.path().join("other");
    assert!(!lib(
        "write_deploy_kustomization",
        &[other.to_str().expect("utf-8"), &built, "gpus"]
    )
    .status
    .success());
    assert!(!lib(
        "write_deploy_kustomization",
        &[other.to_str().expect("utf-8"), "localhost/nri-align"]
    )
    .status
    .success());
    assert!(!other.join("kustomization.yaml").exists());
}
