// SPDX-License-Identifier: MPL-2.0

//! Closing a publisher or a subscriber from another thread than the one
//! blocked in it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use cudaipc_channel::ConsumerWaker;

type PublisherInner = cudaipc_transport::Publisher<()>;

/// Closes a [`Publisher`](crate::Publisher) or a
/// [`Subscriber`](crate::Subscriber) from any thread:
/// [`Publisher::closer`](crate::Publisher::closer) and
/// [`Subscriber::closer`](crate::Subscriber::closer) give one. Cloneable,
/// `Send` and `Sync`; it keeps nothing of the channel open.
///
/// [`close`](Self::close) wakes the calls blocked in the publisher
/// (`publish`, `loan`) or the subscriber (`next_frame`), which return
/// [`Error::Closed`](crate::Error::Closed) at once, as every later call does.
/// Frames already handed out stay valid: each holds its own slot until
/// dropped.
///
/// ```
/// use cudaipc::{Error, Publisher, PublisherOptions, Subscriber, SubscriberOptions, Transport,
///               VideoFormat, VideoLayout};
///
/// let channel = format!("doc-closer-{}", std::process::id());
/// let layout = VideoLayout::new(VideoFormat::Gray8, 8, 8)?;
/// let options = PublisherOptions { transport: Transport::Host, ..Default::default() };
/// let _publisher = Publisher::create(&channel, layout, options)?;
/// let mut subscriber = Subscriber::attach(&channel, SubscriberOptions::default())?;
/// let closer = subscriber.closer();
/// let reader = std::thread::spawn(move || subscriber.next_frame(None).map(|f| f.is_some()));
/// closer.close(); // e.g. on a UI's "stop"
/// assert!(matches!(reader.join().unwrap(), Err(Error::Closed)));
/// # Ok::<(), cudaipc::Error>(())
/// ```
#[derive(Clone)]
pub struct Closer(Target);

#[derive(Clone)]
enum Target {
    Publisher {
        closed: Arc<AtomicBool>,
        /// Weak: a closer left behind does not keep the slots.
        publisher: Weak<PublisherInner>,
    },
    Subscriber {
        closed: Arc<AtomicBool>,
        waker: ConsumerWaker,
    },
}

impl std::fmt::Debug for Closer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let of = match self.0 {
            Target::Publisher { .. } => "publisher",
            Target::Subscriber { .. } => "subscriber",
        };
        f.debug_struct("Closer")
            .field("of", &of)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Closer {
    pub(crate) fn of_publisher(closed: &Arc<AtomicBool>, publisher: &Arc<PublisherInner>) -> Self {
        Self(Target::Publisher {
            closed: closed.clone(),
            publisher: Arc::downgrade(publisher),
        })
    }

    pub(crate) fn of_subscriber(closed: &Arc<AtomicBool>, waker: ConsumerWaker) -> Self {
        Self(Target::Subscriber {
            closed: closed.clone(),
            waker,
        })
    }

    /// Closes it and wakes its blocked calls. A publisher's channel closes
    /// as when the publisher is dropped: after an `eos`, this call first
    /// gives consumers up to 5 s to take what was published (blocked calls
    /// return at once all the same). A subscriber detaches when it is
    /// dropped. Idempotent.
    pub fn close(&self) {
        match &self.0 {
            Target::Publisher { closed, publisher } => {
                if let Some(publisher) = publisher.upgrade() {
                    close_publisher(closed, &publisher);
                } else {
                    closed.store(true, Ordering::SeqCst);
                }
            }
            Target::Subscriber { closed, waker } => {
                closed.store(true, Ordering::SeqCst);
                waker.wake();
            }
        }
    }

    /// Whether [`close`](Self::close) was called (or the publisher
    /// dropped).
    pub fn is_closed(&self) -> bool {
        match &self.0 {
            Target::Publisher { closed, .. } | Target::Subscriber { closed, .. } => {
                closed.load(Ordering::SeqCst)
            }
        }
    }
}

/// Closes `publisher` once: its waits see `closed` (loans) or the
/// transport's own interrupt (copies) and end; then the channel closes.
pub(crate) fn close_publisher(closed: &AtomicBool, publisher: &PublisherInner) {
    if closed.swap(true, Ordering::SeqCst) {
        return;
    }
    // Interrupts and wakes every wait first; after an EOS the close lets
    // consumers take the frames before it removes the channel.
    publisher.close(Duration::ZERO);
}
