use super::*;

#[test]
fn env_var_takes_the_last_exact_key() {
    let c = ContainerView {
        env: vec![
            "NVIDIA_VISIBLE_DEVICES=all".into(),
            "NVIDIA_VISIBLE_DEVICES_X=1".into(),
            "NVIDIA_VISIBLE_DEVICES=GPU-1".into(),
        ],
        ..Default::default()
    };
    assert_eq!(c.env_var("NVIDIA_VISIBLE_DEVICES"), Some("GPU-1"));
    assert_eq!(c.env_var("NVIDIA"), None);
}
