use super::*;

#[test]
fn quantities() {
    assert_eq!(cpu_milli(&Quantity::Text("500m".into())), Some(500));
    assert_eq!(cpu_milli(&Quantity::Text("16".into())), Some(16000));
    assert_eq!(cpu_milli(&Quantity::Number(1.5)), Some(1500));
    assert_eq!(cpu_milli(&Quantity::Text("lots".into())), None);
    assert_eq!(bytes(&Quantity::Text("64Gi".into())), Some(64 << 30));
    assert_eq!(bytes(&Quantity::Text("1G".into())), Some(1_000_000_000));
    assert_eq!(bytes(&Quantity::Number(4096.0)), Some(4096));
    assert_eq!(bytes(&Quantity::Text("-1Gi".into())), None);
    // Out of range or not a number: an error, never a saturated request.
    assert_eq!(bytes(&Quantity::Text("99999999999Ti".into())), None);
    assert_eq!(bytes(&Quantity::Number(1e30)), None);
    assert_eq!(cpu_milli(&Quantity::Number(1e30)), None);
    assert_eq!(cpu_milli(&Quantity::Text("inf".into())), None);
    assert_eq!(cpu_milli(&Quantity::Text("NaN".into())), None);
}
