use super::*;

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("nri-align-crictl").chain(args.iter().copied()))
        .expect("parse")
}

#[test]
fn global_flags_before_subcommand() {
    let cli = parse(&["-r", "unix:///x.sock", "--timeout", "5s", "ps", "-a", "-q"]);
    assert_eq!(cli.runtime_endpoint.as_deref(), Some("unix:///x.sock"));
    assert_eq!(cli.timeout.as_deref(), Some("5s"));
    match cli.command {
        Command::Ps(ps) => assert!(ps.all && ps.list.quiet),
        other => panic!("{other:?}"),
    }
}

#[test]
fn exec_takes_the_rest_as_command() {
    let cli = parse(&[
        "exec",
        "-s",
        "abc",
        "sh",
        "-c",
        "grep Cpus /proc/self/status",
    ]);
    match cli.command {
        Command::Exec { sync, id, cmd, .. } => {
            assert!(sync);
            assert_eq!(id, "abc");
            assert_eq!(cmd, vec!["sh", "-c", "grep Cpus /proc/self/status"]);
        }
        other => panic!("{other:?}"),
    }
    // Flags after the container ID belong to the command.
    let cli = parse(&["exec", "abc", "ls", "-l", "/dev"]);
    assert!(matches!(cli.command, Command::Exec { cmd, .. } if cmd == ["ls", "-l", "/dev"]));
}

#[test]
fn create_and_update_args() {
    let cli = parse(&["create", "pod1", "c.json", "p.json"]);
    assert!(matches!(cli.command, Command::Create { pod_id, .. } if pod_id == "pod1"));
    let cli = parse(&[
        "update",
        "--cpuset-cpus",
        "0-1",
        "--cpu-quota",
        "20000",
        "c1",
        "c2",
    ]);
    match cli.command {
        Command::Update(u) => {
            assert_eq!(u.cpuset_cpus.as_deref(), Some("0-1"));
            assert_eq!(u.cpu_quota, Some(20000));
            assert_eq!(u.ids, vec!["c1", "c2"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn list_output_formats() {
    let cli = parse(&["pods", "-o", "json", "--name", "^p1$", "--label", "a=b"]);
    match cli.command {
        Command::Pods(p) => {
            assert_eq!(p.list.output, Format::Json);
            assert_eq!(p.list.name.as_deref(), Some("^p1$"));
            assert_eq!(p.list.labels, vec!["a=b"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(Cli::try_parse_from(["x", "ps", "-o", "xml"]).is_err());
    assert!(
        Cli::try_parse_from(["x", "start"]).is_err(),
        "start needs an ID"
    );
}

#[test]
fn name_filter_semantics() {
    assert!(name_matches("web", "my-web-1"));
    assert!(name_matches("^my", "my-web-1"));
    assert!(!name_matches("^web", "my-web-1"));
    assert!(name_matches("-1$", "my-web-1"));
    assert!(name_matches("^my-web-1$", "my-web-1"));
    assert!(!name_matches("^my-web$", "my-web-1"));
}

#[test]
fn label_filters() {
    let m = parse_labels(&["a=b".into(), "c=".into()]).expect("labels");
    assert_eq!(m.get("a").map(String::as_str), Some("b"));
    assert_eq!(m.get("c").map(String::as_str), Some(""));
    assert!(parse_labels(&["novalue".into()]).is_err());
    assert!(parse_labels(&["=x".into()]).is_err());
}

#[test]
fn exec_deadlines() {
    assert_eq!(
        exec_deadline(5, Duration::from_secs(10)),
        Duration::from_secs(15)
    );
    assert_eq!(
        exec_deadline(0, Duration::from_secs(10)),
        Duration::from_secs(3600)
    );
}

#[test]
fn updatep_takes_the_update_flags_and_pod_ids() {
    let cli = parse(&["updatep", "--cpu-quota", "200000", "--memory", "1024", "p1"]);
    match cli.command {
        Command::Updatep(u) => {
            assert_eq!(u.cpu_quota, Some(200_000));
            assert_eq!(u.memory, Some(1024));
            assert_eq!(u.ids, vec!["p1"]);
        }
        other => panic!("{other:?}"),
    }
}
