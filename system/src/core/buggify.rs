//! Fault points compiled into the system code (FoundationDB's BUGGIFY).
//!
//! A component asks `env.buggify(Point::X)` where a failure matters — between a write and
//! its acknowledgement, at a full queue, on a late lease renewal — and takes the failure
//! path when the answer is true. The real environment always says false; the simulator
//! says true with a seed-drawn probability, only for the points a scenario switches on
//! (the swarm families), so scripted scenarios keep their traces. Each point is a fault the
//! real world can produce at that spot (a lost answer, a refused connection, a pause), never
//! a bug planted in the logic: the hardened variant must survive every one.
//!
//! `orrery buggify-points` lists them.

use std::fmt;
use std::str::FromStr;

/// Declares the points: each one's variant, its name as scenarios and traces write it, and
/// what firing it does.
macro_rules! points {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal : $what:literal ),* $(,)?) => {
        /// A fault point in the system code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Point {
            $( $(#[$doc])* $variant ),*
        }

        impl Point {
            /// Every point, in declaration order.
            pub const ALL: &'static [Point] = &[$(Point::$variant),*];

            /// The point's name (`component.where`), as scenarios and traces write it.
            pub fn name(self) -> &'static str {
                match self { $(Point::$variant => $name),* }
            }

            /// What firing the point does, in one line.
            pub fn what(self) -> &'static str {
                match self { $(Point::$variant => $what),* }
            }

            /// How much likelier than a run's probability this point fires: points evaluated
            /// rarely (once per registration, per anti-entropy pass) fire 4 times as often,
            /// so a run sees them at all.
            pub fn boost(self) -> f64 {
                match self {
                    Point::TunnelClientDialFails
                    | Point::TunnelClientDropAfterRegister
                    | Point::PlatformTunnelDropAfterRegister
                    | Point::ReporterResyncReadFails => 4.0,
                    _ => 1.0,
                }
            }
        }
    };
}

points! {
    /// An event arrives at a queue that is (as far as this push is concerned) full.
    ReporterQueueFull = "reporter.queue_full":
        "an app event meets a full queue (faithful drops it, hardened parks it for resync)",
    /// The dedup cache does not answer the lookup in time.
    ReporterCacheReadFails = "reporter.cache_read_fails":
        "the dedup lookup fails (as a Redis timeout): the event is built and sent anyway",
    /// A read from the Argo CD server fails while building the payload.
    ReporterArgocdReadFails = "reporter.argocd_read_fails":
        "the first Argo CD server read for an event fails: the event carries the error",
    /// The reporter process stops between the platform's acknowledgement and the cache write.
    ReporterAfterSendBeforeCache = "reporter.after_send_before_cache":
        "the event was delivered but its digest is never written to the dedup cache",
    /// A worker is paused (GC, CPU starvation) before it handles its next app.
    ReporterWorkerStall = "reporter.worker_stall":
        "a worker pauses 1-10 s before processing the app it took",
    /// hardened: a lease renewal arrives after the lease has expired.
    ReporterLeaseRenewLate = "reporter.lease_renew_late":
        "a lease renewal is held back by 1-2 lease durations, so the lease expires while the replica works",
    /// hardened: the anti-entropy pass cannot read the platform's read model.
    ReporterResyncReadFails = "reporter.resync_read_fails":
        "the anti-entropy pass's read of the platform read model fails",
    /// The dedup cache acknowledges a write it then loses (eviction).
    CacheWriteDropped = "cache.write_dropped":
        "the dedup cache answers a PUT with 204 but does not keep the entry",
    /// The events API stored an event, then its handler failed before answering.
    PlatformEventsCrashAfterStore = "platform.events.crash_after_store":
        "the events API queues an event, then answers 503 as if its handler crashed",
    /// The events API answers late.
    PlatformEventsSlow = "platform.events.slow":
        "the events API pauses 1-5 s before handling a request",
    /// The tunnel server drops a runtime's tunnel right after accepting its registration.
    PlatformTunnelDropAfterRegister = "platform.tunnel.drop_after_register":
        "the tunnel server registers a runtime, then drops its tunnel at once",
    /// The gateway pauses before forwarding a client's request into a tunnel.
    GatewaySlowForward = "gateway.slow_forward":
        "the gateway pauses 0.5-3 s before forwarding a request to a runtime",
    /// The tunnel client's dial is refused.
    TunnelClientDialFails = "tunnel_client.dial_fails":
        "the tunnel client's connection to the tunnel server is refused",
    /// The runtime's tunnel drops right after it came up (a registration racing a disconnect).
    TunnelClientDropAfterRegister = "tunnel_client.drop_after_register":
        "the tunnel client drops its tunnel right after the registration was accepted",
    /// A tunnel write goes out as two WebSocket messages.
    TunnelFrameSplit = "tunnel.frame_split":
        "a tunnel write is split into two WebSocket messages",
    /// A tunnel write is held back briefly.
    TunnelFrameDelay = "tunnel.frame_delay":
        "a tunnel write waits 1-200 ms before it is sent",
    /// An HTTP client's connection attempt is refused (any component: kube, Argo CD, platform, cache).
    HttpConnectRefused = "http.connect_refused":
        "an HTTP client's connection attempt is refused (kube-rs, Argo CD, platform, cache clients)",
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a fault point.
#[derive(Debug, thiserror::Error)]
#[error("unknown fault point {0:?} (orrery buggify-points lists them)")]
pub struct UnknownPoint(pub String);

impl FromStr for Point {
    type Err = UnknownPoint;

    fn from_str(name: &str) -> Result<Point, UnknownPoint> {
        Point::ALL
            .iter()
            .copied()
            .find(|p| p.name() == name)
            .ok_or_else(|| UnknownPoint(name.to_string()))
    }
}

impl serde::Serialize for Point {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Point {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Point, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<&str> = Point::ALL.iter().map(|p| p.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Point::ALL.len());
        assert!(Point::ALL.len() >= 15);
        for point in Point::ALL {
            assert_eq!(point.name().parse::<Point>().unwrap(), *point);
        }
        let error = "reporter.nope".parse::<Point>().unwrap_err().to_string();
        assert!(error.contains("reporter.nope") && error.contains("buggify-points"));
    }
}
