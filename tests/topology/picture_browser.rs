//! The host pictures rendered by a real browser: `nri-align topology --svg` (and
//! `placements --svg`) write SVG that Debian's headless Chromium parses without an error,
//! paints (the screenshot is not blank) and whose DOM carries the legend's text. Skipped, and
//! said, where no headless Chromium is installed (hack/setup installs it; CI has it).

use std::path::{Path, PathBuf};
use std::process::Command;

const BROWSERS: [&str; 3] = ["chromium-headless-shell", "chromium", "google-chrome"];

fn browser() -> Option<PathBuf> {
    BROWSERS.iter().find_map(|b| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(b))
            .find(|p| p.is_file())
    })
}

/// Runs the browser headless on `svg` with `args` (a screenshot or a DOM dump).
fn headless(browser: &Path, svg: &Path, args: &[&str]) -> std::process::Output {
    let profile = tempfile::tempdir().expect("profile dir");
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", svg.display()))
        .output()
        .expect("browser runs")
}

/// Share of pixels in `png` that differ from its top-left pixel (the background).
fn painted_share(png: &Path) -> f64 {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png).expect("screenshot"),
    ));
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let px = info.color_type.samples();
    let data = &buf[..info.buffer_size()];
    let background = &data[..px];
    let painted = data.chunks(px).filter(|p| p != &background).count();
    painted as f64 / (data.len() / px) as f64
}

fn nri_align(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(args)
        .output()
        .expect("nri-align runs");
    assert!(
        out.status.success(),
        "nri-align {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn the_topology_picture_renders_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("tmp");
    let svg = dir.path().join("vm-2s4n.svg");
    nri_align(&[
        "topology",
        "--host",
        "vm-2s4n",
        "--svg",
        svg.to_str().expect("path"),
    ]);
    let text = std::fs::read_to_string(&svg).expect("svg written");
    // Well-formed, and its own text names every NUMA node and GPU of the host.
    let doc = roxmltree::Document::parse(&text).expect("valid XML");
    let texts: String = doc.descendants().filter_map(|n| n.text()).collect();
    for needle in [
        "NUMA node 0",
        "NUMA node 3",
        "NUMA node 4",
        "GPU3",
        "Legend",
        "free CPU",
    ] {
        assert!(texts.contains(needle), "{needle} in the picture");
    }
    // The same host draws the same bytes, to a file or to standard output, and the README's
    // picture of the demo host is what this build draws.
    assert_eq!(
        nri_align(&["topology", "--host", "vm-2s4n", "--svg", "-"]),
        text
    );
    let readme_picture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/images/demo-host.svg");
    assert_eq!(
        std::fs::read_to_string(&readme_picture).expect("docs/images/demo-host.svg"),
        text,
        "redraw it: nri-align topology --host vm-2s4n --svg docs/images/demo-host.svg"
    );

    let Some(browser) = browser() else {
        test_support::skip::skip(
            "the_topology_picture_renders_in_a_real_browser",
            &format!(
                "no headless Chromium ({}); hack/setup installs it",
                BROWSERS.join(", ")
            ),
        );
        assert!(
            std::env::var_os("NRI_ALIGN_REQUIRE_BROWSER").is_none(),
            "NRI_ALIGN_REQUIRE_BROWSER is set and no browser was found"
        );
        return;
    };
    let png = dir.path().join("shot.png");
    let out = headless(
        &browser,
        &svg,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1100,760",
        ],
    );
    assert!(
        png.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let share = painted_share(&png);
    assert!(
        share > 0.05,
        "the screenshot is blank ({:.1} % painted)",
        share * 100.0
    );
    // The DOM the browser built from the file: no XML parser error, the legend's text there.
    let dom = headless(&browser, &svg, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        !dom.contains("parsererror"),
        "the browser could not parse the picture: {dom}"
    );
    assert!(dom.contains("Legend") && dom.contains("free CPU"), "{dom}");
}
