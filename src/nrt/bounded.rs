//! Bounds on every answer of the API server: its size and the time to receive it whole.
//!
//! kube reads a whole response body into memory before decoding it, and its read timeout
//! restarts with every byte: an endless body grew the daemon to 9.8 GiB, and a body trickled a
//! byte every 5 s held the publisher for its whole run. This tower layer, the outermost of the
//! client's stack, ends a request whose body passes [`ResponseLimits::max_bytes`] or that is
//! not complete within [`ResponseLimits::total`] from the moment it was sent; kube reports
//! either as a failed request (`kube::Error::Service`), which the publisher retries with
//! backoff.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Largest answer read: a NodeResourceTopology object of the largest node is a few tens of
/// KiB, and so is any Status the server sends.
pub const MAX_RESPONSE_BYTES: usize = 8 << 20;

/// The bounds of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseLimits {
    /// Largest response body, in bytes.
    pub max_bytes: usize,
    /// From sending the request to the end of the response body.
    pub total: Duration,
}

/// Why a response was cut off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseLimitError {
    /// The body passed the size limit.
    #[error("the API server's answer is over {0} bytes; not read further")]
    TooLarge(usize),
    /// The answer was not complete in time.
    #[error("the API server's answer was not complete within {0:?}")]
    TooSlow(Duration),
}

impl<S> tower_layer::Layer<S> for ResponseLimits {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            limits: *self,
        }
    }
}

/// The client's service with [`ResponseLimits`] applied.
#[derive(Clone)]
pub struct Bounded<S> {
    inner: S,
    limits: ResponseLimits,
}

impl<S, ReqB, ResB> tower_service::Service<http::Request<ReqB>> for Bounded<S>
where
    S: tower_service::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = http::Response<BoundedBody<ResB>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<ReqB>) -> Self::Future {
        let limits = self.limits;
        let deadline = Instant::now() + limits.total;
        let answer = self.inner.call(req);
        Box::pin(async move {
            let resp = tokio::time::timeout_at(deadline, answer)
                .await
                .map_err(|_| Box::new(ResponseLimitError::TooSlow(limits.total)) as BoxError)?
                .map_err(Into::into)?;
            Ok(resp.map(|body| BoundedBody {
                inner: Box::pin(body),
                left: limits.max_bytes,
                limits,
                deadline: Box::pin(tokio::time::sleep_until(deadline)),
            }))
        })
    }
}

/// A response body cut off at the size limit or the deadline.
pub struct BoundedBody<B> {
    inner: Pin<Box<B>>,
    left: usize,
    limits: ResponseLimits,
    deadline: Pin<Box<Sleep>>,
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        // Polled first so its timer wakes this task even while no byte comes.
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(ResponseLimitError::TooSlow(
                this.limits.total,
            )))));
        }
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if data.len() > this.left {
                        return Poll::Ready(Some(Err(Box::new(ResponseLimitError::TooLarge(
                            this.limits.max_bytes,
                        )))));
                    }
                    this.left -= data.len();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client for `config` whose every answer is bounded by `limits`.
pub fn client(config: kube::Config, limits: ResponseLimits) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&limits)
        .build())
}

#[cfg(test)]
#[path = "bounded_tests.rs"]
mod tests;
