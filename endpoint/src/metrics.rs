//! Metrics of the consumer endpoint (`shardring_endpoint_*`): requests by
//! route and status code, open long-polls and connections, TokenReviews by
//! result and token cache hits, and requests refused by each rate limit.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of an answered request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `view`, `releases`, `healthz` or `other`.
    pub route: &'static str,
    /// The HTTP status code.
    pub code: u16,
}

/// Label of a TokenReview's result.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabel {
    /// `authenticated`, `rejected` or `error` (the review itself failed).
    pub result: &'static str,
}

/// Label of a rate limit.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    /// `ip` (before authentication) or `pod` (after).
    pub key: &'static str,
}

/// Handles of the endpoint's metrics (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct EndpointMetrics {
    /// Requests answered, by route and code.
    pub requests: Family<RequestLabels, Counter>,
    /// Long-polls waiting now.
    pub open_long_polls: Gauge,
    /// TokenReviews sent, by result.
    pub token_reviews: Family<ReviewLabel, Counter>,
    /// Requests authenticated from the token cache.
    pub token_cache_hits: Counter,
    /// Requests refused by a rate limit, by limit.
    pub rate_limited: Family<LimitLabel, Counter>,
    /// Open connections.
    pub connections: Gauge,
}

impl EndpointMetrics {
    /// Registers the metrics into `registry` (prefix `shardring`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "endpoint_requests",
            "Consumer endpoint requests answered, by route and status code",
            metrics.requests.clone(),
        );
        registry.register(
            "endpoint_open_long_polls",
            "Consumer endpoint long-polls waiting for a newer view",
            metrics.open_long_polls.clone(),
        );
        registry.register(
            "endpoint_token_reviews",
            "TokenReviews sent to authenticate consumers, by result",
            metrics.token_reviews.clone(),
        );
        registry.register(
            "endpoint_token_cache_hits",
            "Consumer requests authenticated from the token cache",
            metrics.token_cache_hits.clone(),
        );
        registry.register(
            "endpoint_rate_limited",
            "Consumer endpoint requests refused by a rate limit (ip or pod)",
            metrics.rate_limited.clone(),
        );
        registry.register(
            "endpoint_connections",
            "Open connections to the consumer endpoint",
            metrics.connections.clone(),
        );
        metrics
    }

    pub(crate) fn request(&self, route: &'static str, code: u16) {
        self.requests
            .get_or_create(&RequestLabels { route, code })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix_and_suffixes() {
        let mut registry = Registry::with_prefix("shardring");
        let metrics = EndpointMetrics::register(&mut registry);
        metrics.request("view", 200);
        metrics
            .rate_limited
            .get_or_create(&LimitLabel { key: "ip" })
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("shardring_endpoint_requests_total{route=\"view\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("shardring_endpoint_rate_limited_total{key=\"ip\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("shardring_endpoint_open_long_polls 0"),
            "{text}"
        );
        assert!(text.contains("shardring_endpoint_connections 0"), "{text}");
    }
}
