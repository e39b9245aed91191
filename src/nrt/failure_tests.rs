use super::*;

#[test]
fn api_errors_map_to_reasons() {
    let api = |code: u16| {
        kube::Error::Api(
            kube::core::Status {
                code,
                ..Default::default()
            }
            .boxed(),
        )
    };
    let reason = |e| Failure::from(e).reason;
    assert_eq!(reason(api(401)), "unauthorized");
    assert_eq!(reason(api(403)), "forbidden");
    assert_eq!(reason(api(422)), "invalid");
    assert_eq!(reason(api(503)), "server");
    assert_eq!(reason(api(429)), "server");
    assert!(Failure::from(api(404)).message.contains("CRD installed"));
}

#[test]
fn a_missing_crd_says_what_to_install() {
    let e = kube::Error::Api(
        kube::core::Status {
            code: 404,
            message: "the server could not find the requested resource".into(),
            ..Default::default()
        }
        .boxed(),
    );
    let f = Failure::crd_missing(&e);
    assert_eq!(f.reason, CRD_MISSING);
    assert!(
        f.message.starts_with("CRD not installed: "),
        "{}",
        f.message
    );
    assert!(f.message.contains(CRD_NAME), "{}", f.message);
}
