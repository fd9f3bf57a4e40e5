//! The service a [`RateLimitLayer`](super::RateLimitLayer) makes, and its
//! response future: key, check, then call the inner service or answer.

use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{ready, Context, Poll, Waker};
use core::time::Duration;
use std::sync::Arc;

use ::tower::Service;
use http::request::Parts;
use http::{Request, Response};
use pin_project_lite::pin_project;

use super::key::{Extraction, KeyExtractor};
#[cfg(feature = "metrics")]
use super::metrics::Outcome;
use super::refusal::Refusal;
use super::response::{Respond, Stamp};
use crate::check::{AsyncCheck, CheckError};
use crate::decision::Decision;

pub(super) type SkipFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;
pub(super) type PartitionFn<K> = Arc<dyn Fn(&K) -> Vec<u8> + Send + Sync>;

/// What a layer and every service it makes share.
pub(super) struct Shared<C, E: KeyExtractor> {
    pub(super) limiter: Arc<C>,
    pub(super) extractor: E,
    pub(super) skip: Option<SkipFn>,
    pub(super) partition_key: Option<PartitionFn<E::Key>>,
    pub(super) respond: Arc<Respond>,
}

impl<C, E: KeyExtractor + Clone> Clone for Shared<C, E> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            skip: self.skip.clone(),
            partition_key: self.partition_key.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}

impl<C, E: KeyExtractor + fmt::Debug> fmt::Debug for Shared<C, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("policy", &self.respond.name())
            .field("quota", &self.respond.quota)
            .field("extractor", &self.extractor)
            .field("admitted_headers", &self.respond.admitted)
            .field("legacy_headers", &self.respond.legacy)
            .field("retry_jitter_s", &self.respond.jitter)
            .field("decision_extension", &self.respond.extension)
            .field("skip_if", &self.skip.is_some())
            .field("hooks", &self.respond.hooks)
            .field("partition_key", &self.partition_key.is_some())
            .finish_non_exhaustive()
    }
}

/// The service [`RateLimitLayer`](super::RateLimitLayer) wraps around an inner service. Clones
/// share the layer's limiter.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::{Request, Response};
/// use tollgate::tower::{KeyFn, Extraction, RateLimitLayer};
/// use tollgate::SlidingWindowCounter;
/// use tower::{service_fn, Layer};
///
/// let limiter = SlidingWindowCounter::builder().limit(5).window(Duration::from_secs(1)).build()?;
/// let everyone = KeyFn::new(|_: &http::request::Parts| Extraction::Key(String::from("all")));
/// let service = RateLimitLayer::new(limiter, everyone).layer(service_fn(|_: Request<String>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::new()))
/// }));
/// let _clone = service.clone(); // the same five requests per second
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct RateLimitService<S, C, E: KeyExtractor> {
    inner: S,
    shared: Arc<Shared<C, E>>,
}

impl<S, C, E: KeyExtractor> RateLimitService<S, C, E> {
    pub(super) fn new(inner: S, shared: Arc<Shared<C, E>>) -> Self {
        Self { inner, shared }
    }
}

impl<S: Clone, C, E: KeyExtractor> Clone for RateLimitService<S, C, E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, C, E: KeyExtractor + fmt::Debug> fmt::Debug for RateLimitService<S, C, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("limit", &self.shared)
            .finish()
    }
}

impl<S, C, E, B, R> Service<Request<B>> for RateLimitService<S, C, E>
where
    S: Service<Request<B>, Response = Response<R>> + Clone,
    C: AsyncCheck<E::Key>,
    E: KeyExtractor,
    R: From<String>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    /// Always ready: the layer decides on a request before the inner
    /// service is ready for it, so that a refusal is answered at once
    /// even while the inner service holds requests back (a concurrency
    /// limit, say). An admitted request waits in its response future
    /// until the inner service is ready for it, as
    /// tower's `ServiceExt::oneshot` does.
    #[inline]
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let shared = &*self.shared;
        if shared.skip.as_ref().is_some_and(|skip| skip(&parts)) {
            #[cfg(feature = "metrics")]
            shared.respond.requests.count(&parts, Outcome::Skipped);
            return forward(&mut self.inner, Request::from_parts(parts, body), None);
        }
        let key = match shared.extractor.extract(&parts) {
            Extraction::Key(key) => key,
            Extraction::Skip => {
                #[cfg(feature = "metrics")]
                shared.respond.requests.count(&parts, Outcome::Skipped);
                return forward(&mut self.inner, Request::from_parts(parts, body), None);
            }
            Extraction::Reject(rejection) => {
                #[cfg(feature = "metrics")]
                shared.respond.requests.count(&parts, Outcome::Rejected);
                return ResponseFuture::ready(shared.respond.refuse(
                    Refusal::Rejected {
                        rejection: &rejection,
                    },
                    &parts,
                    None,
                ));
            }
        };
        let pk = shared
            .partition_key
            .as_ref()
            .map(|f| super::sf::sf_bytes(&f(&key)));
        let mut check = shared.limiter.check(&key, 1);
        // An in-process limiter's decision is ready at once: act on it now,
        // reading it where the check left it rather than moving it out.
        // The no-op waker is never woken; a pending check is polled again,
        // with the task's waker, by the response future.
        let mut noop = Context::from_waker(Waker::noop());
        match &Pin::new(&mut check).poll(&mut noop) {
            Poll::Ready(result) => match judge(result, &mut parts, &shared.respond, pk) {
                Ok(stamp) => forward(&mut self.inner, Request::from_parts(parts, body), stamp),
                Err(refused) => ResponseFuture::ready(refused),
            },
            Poll::Pending => {
                // A clone of the inner service goes with the request, to
                // be readied once the check admits it.
                ResponseFuture {
                    state: State::Checking {
                        waiting: Some(Box::new(Waiting {
                            check: Box::new(check),
                            inner: self.inner.clone(),
                            parts,
                            body,
                            respond: Arc::clone(&shared.respond),
                            pk,
                        })),
                    },
                }
            }
        }
    }
}

/// Calls `inner` with `request` if it is ready for it now; otherwise
/// the response future readies it first, and `inner` is left a clone for
/// the next request (the one it was readying goes with this request).
#[inline]
fn forward<S, B>(inner: &mut S, request: Request<B>, stamp: Option<Stamp>) -> ResponseFuture<S, B>
where
    S: Service<Request<B>> + Clone,
{
    // A service ready at once (most are) is called at once. The no-op
    // waker is never woken: a service not ready yet is polled again, with
    // the task's waker, by the response future.
    let mut noop = Context::from_waker(Waker::noop());
    match inner.poll_ready(&mut noop) {
        Poll::Ready(Ok(())) => ResponseFuture::calling(inner.call(request), stamp),
        Poll::Ready(Err(error)) => ResponseFuture {
            state: State::Failed { error: Some(error) },
        },
        Poll::Pending => {
            let clone = inner.clone();
            ResponseFuture::readying(mem::replace(inner, clone), request, stamp)
        }
    }
}

type CheckFuture = Box<dyn Future<Output = Result<Decision, CheckError>> + Send + Unpin>;

/// A request whose check is still pending, with a clone of the inner
/// service for it.
struct Waiting<S, B> {
    check: CheckFuture,
    inner: S,
    parts: Parts,
    body: B,
    respond: Arc<Respond>,
    pk: Option<String>,
}

/// Acts on a decision: the headers for the inner service's response (and
/// the decision in the request's extensions), or the layer's refusal. The
/// request's head is borrowed, not moved, so that it is copied no more
/// than its way through `into_parts` and `from_parts` needs.
#[inline(always)]
fn judge<R: From<String>>(
    result: &Result<Decision, CheckError>,
    parts: &mut Parts,
    respond: &Respond,
    pk: Option<String>,
) -> Result<Option<Stamp>, Response<R>> {
    let decision = match result {
        Ok(decision) => decision,
        Err(error) => {
            #[cfg(feature = "metrics")]
            respond.requests.count(parts, Outcome::Unavailable);
            return Err(respond.refuse(Refusal::Unavailable { error }, parts, None));
        }
    };
    #[cfg(feature = "metrics")]
    respond.requests.count(
        parts,
        if decision.is_denied() {
            Outcome::Limited
        } else {
            Outcome::Admitted
        },
    );
    if decision.is_denied() {
        let retry_after = Duration::from_secs(respond.retry_after(decision));
        return Err(respond.refuse(
            Refusal::Limited {
                decision,
                retry_after,
                policy: respond.plain_name(),
            },
            parts,
            pk.as_deref(),
        ));
    }
    let stamp = respond.stamp(decision, pk.as_deref());
    if respond.extension {
        parts.extensions.insert(*decision);
    }
    Ok(stamp)
}

pin_project! {
    /// The response future of a [`RateLimitService`]: the inner service's
    /// response with the rate-limit headers added, or the layer's own
    /// `429` or rejection.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<B>>,
    {
        Checking { waiting: Option<Box<Waiting<S, B>>> },
        Readying { readying: Option<Box<Readying<S, B>>> },
        Calling { #[pin] future: S::Future, stamp: Option<Stamp> },
        Ready { response: Option<S::Response> },
        Failed { error: Option<S::Error> },
    }
}

/// An admitted request waiting for the inner service to be ready for it.
struct Readying<S, B> {
    inner: S,
    request: Request<B>,
    stamp: Option<Stamp>,
}

impl<S: Service<Request<B>>, B> ResponseFuture<S, B> {
    fn calling(future: S::Future, stamp: Option<Stamp>) -> Self {
        Self {
            state: State::Calling { future, stamp },
        }
    }

    fn readying(inner: S, request: Request<B>, stamp: Option<Stamp>) -> Self {
        Self {
            state: State::Readying {
                readying: Some(Box::new(Readying {
                    inner,
                    request,
                    stamp,
                })),
            },
        }
    }

    fn ready(response: S::Response) -> Self {
        Self {
            state: State::Ready {
                response: Some(response),
            },
        }
    }
}

impl<S: Service<Request<B>>, B> fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Checking { .. } => "checking",
            State::Readying { .. } => "readying",
            State::Calling { .. } => "calling",
            State::Ready { .. } => "ready",
            State::Failed { .. } => "failed",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

/// The pending check's end: the decision acted on, once it is in. Out of
/// line, to keep the response future's common path (the inner service's
/// response) short.
#[inline(never)]
fn checked<S, B, R>(
    waiting: &mut Option<Box<Waiting<S, B>>>,
    cx: &mut Context<'_>,
) -> Poll<ResponseFuture<S, B>>
where
    S: Service<Request<B>, Response = Response<R>>,
    R: From<String>,
{
    let pending = waiting.as_mut().expect("polled after completion");
    let result = ready!(Pin::new(&mut pending.check).poll(cx));
    let Waiting {
        inner,
        mut parts,
        body,
        respond,
        pk,
        ..
    } = *waiting.take().expect("checked above");
    Poll::Ready(match judge(&result, &mut parts, &respond, pk) {
        Ok(stamp) => ResponseFuture::readying(inner, Request::from_parts(parts, body), stamp),
        Err(refused) => ResponseFuture::ready(refused),
    })
}

/// The inner service readied for an admitted request, then called: the
/// call's future, or the error readying it failed with. Out of line, as
/// [`checked`] is.
#[inline(never)]
fn readied<S, B>(
    readying: &mut Option<Box<Readying<S, B>>>,
    cx: &mut Context<'_>,
) -> Poll<Result<ResponseFuture<S, B>, S::Error>>
where
    S: Service<Request<B>>,
{
    let pending = readying.as_mut().expect("polled after completion");
    if let Err(error) = ready!(pending.inner.poll_ready(cx)) {
        *readying = None;
        return Poll::Ready(Err(error));
    }
    let Readying {
        mut inner,
        request,
        stamp,
    } = *readying.take().expect("readied above");
    Poll::Ready(Ok(ResponseFuture::calling(inner.call(request), stamp)))
}

impl<S, B, R> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<R>>,
    R: From<String>,
{
    type Output = Result<Response<R>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Checking { waiting } => {
                    let next = ready!(checked(waiting, cx));
                    state.set(next.state);
                }
                StateProj::Readying { readying } => {
                    let next = ready!(readied(readying, cx))?;
                    state.set(next.state);
                }
                StateProj::Calling { future, stamp } => {
                    // The response is stamped where the inner future left
                    // it, in the output, rather than moved out and back.
                    let mut output = future.poll(cx);
                    if let Poll::Ready(Ok(response)) = &mut output {
                        if let Some(stamp) = stamp.take() {
                            stamp.apply(response.headers_mut());
                        }
                    }
                    return output;
                }
                StateProj::Ready { response } => {
                    return Poll::Ready(Ok(response.take().expect("polled after completion")))
                }
                StateProj::Failed { error } => {
                    return Poll::Ready(Err(error.take().expect("polled after completion")))
                }
            }
        }
    }
}
