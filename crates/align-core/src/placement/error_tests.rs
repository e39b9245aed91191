use super::*;

#[test]
fn bytes_print_in_binary_units() {
    assert_eq!(fmt_bytes(64 << 30), "64Gi");
    assert_eq!(fmt_bytes(1536 << 20), "1536Mi");
    assert_eq!(fmt_bytes((3 << 30) + (1 << 29)), "3584Mi");
    assert_eq!(fmt_bytes(1000), "1000");
    // 451972784Ki: a node's MemTotal; rounded down, never up.
    assert_eq!(fmt_bytes(451_972_784 << 10), "431.0Gi");
    assert_eq!(fmt_bytes((1 << 30) - 1), "1023.9Mi");
    assert_eq!(fmt_bytes(0), "0");
}
