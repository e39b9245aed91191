use super::*;

#[test]
fn merge_prefers_preferred_then_narrow_then_low() {
    let cpu = vec![(0b01, true), (0b10, true), (0b11, false)];
    let gpu = vec![(0b10, true), (0b11, false)];
    assert_eq!(merge(&[cpu.clone(), gpu], 0b11), (0b10, true));
    assert_eq!(merge(&[cpu], 0b11), (0b01, true));
    assert_eq!(
        merge(&[vec![(0b01, false)], vec![(0b10, true)]], 0b11),
        (0b11, false)
    );
}
