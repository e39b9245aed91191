use super::*;

#[test]
fn inherited_fd_must_be_a_socket() {
    let file = std::fs::File::open("/proc/self/status").unwrap();
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&file);
    let err = stream_from_fd(fd).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(stream_from_fd(-1).is_err());
}

#[tokio::test]
async fn update_containers_refused_inside_handlers_and_when_disconnected() {
    let handle = RuntimeHandle::default();
    let inside = IN_EVENT_HANDLER
        .scope(true, handle.update_containers(vec![], vec![]))
        .await;
    assert!(matches!(inside, Err(StubError::CalledFromHandler)));
    let outside = handle.update_containers(vec![], vec![]).await;
    assert!(matches!(outside, Err(StubError::NotConnected)));
}
