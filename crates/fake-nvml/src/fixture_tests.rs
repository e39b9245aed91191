use super::*;

#[test]
fn lists_expand() {
    assert_eq!(parse_list("0-2,7"), vec![0, 1, 2, 7]);
    assert_eq!(parse_list(""), Vec::<u32>::new());
}
