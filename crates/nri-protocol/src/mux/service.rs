//! A service connection of the multiplexer: the logical connection a ttrpc server reads the
//! peer's calls from, watched so that its failure ends the whole multiplexer (see
//! [`Mux::service_listener`](super::Mux::service_listener)).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::framing::RequestFraming;
use super::{MuxConn, MuxError};

/// A [`MuxConn`] whose incoming ttrpc framing is checked, and whose end stops the multiplexer.
pub(super) struct ServiceConn {
    conn: MuxConn,
    framing: RequestFraming,
}

impl ServiceConn {
    pub(super) fn new(conn: MuxConn) -> Self {
        ServiceConn {
            conn,
            framing: RequestFraming::new(),
        }
    }
}

impl AsyncRead for ServiceConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.conn).poll_read(cx, buf))?;
        if let Err(err) = this.framing.feed(&buf.filled()[before..]) {
            let err = MuxError::BadFrame {
                id: this.conn.id,
                reason: err.to_string(),
            };
            this.conn.shared.fail(err.clone());
            return Poll::Ready(Err(err.to_io()));
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ServiceConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_shutdown(cx)
    }
}

impl Drop for ServiceConn {
    fn drop(&mut self) {
        // Only the first reason is kept: after a close, a peer hang-up or a bad frame this
        // changes nothing.
        self.conn.shared.fail(MuxError::ServiceEnded(self.conn.id));
    }
}
