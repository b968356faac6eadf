import CoreMetrics
import NIOConcurrencyHelpers
import Prometheus
import WSBridgeCore

/// The daemon's metrics, recorded through swift-metrics' API into a Prometheus registry of its
/// own (one per daemon: in-process tests never share counters, and nothing depends on the global
/// `MetricsSystem`). `render()` gives the Prometheus text format for the `metrics` op and the
/// HTTP endpoint. Every family is listed, with its help text, in `DaemonMetrics.families` and in
/// docs/metrics.md.
///
/// Rare events (a reconnect, a failed attempt, drops, a round trip) are recorded where they
/// happen. The message and byte counters cost nothing per message: the link counts in plain
/// integers anyway, and each render adds what they gained since the last one. Gauges are set
/// from the live state just before each render, so an idle daemon does no metrics work at all.
public final class DaemonMetrics: Sendable {
    /// Why a message was dropped.
    public enum DropReason: String, CaseIterable, Sendable {
        /// A subscriber fell behind by more than `local.subscriber_queue` / `_bytes`: its oldest messages went.
        case subscriberQueueFull = "subscriber_queue_full"
        /// A send was refused: the outbound queue (`queue.max_messages` / `max_bytes`) was full.
        case outboundQueueFull = "outbound_queue_full"
    }

    /// Why the link was lost before a reconnect: the `reason` label of `wsbridge_reconnects_total`.
    public static func reconnectReason(_ reason: DisconnectReason?) -> String {
        switch reason {
        case .serverClosed: "server_closed"
        case .userClosed: "user"
        case .daemonStopped: "daemon"
        case .error: "error"
        case .heartbeatTimeout: "heartbeat_timeout"
        case .networkLost: "network_lost"
        case nil: "unknown"
        }
    }

    /// Every label `reconnectReason` gives, so each series exists (at 0) from the start.
    static let reconnectReasons = ["server_closed", "user", "daemon", "error", "heartbeat_timeout", "network_lost", "unknown"]

    let registry: PrometheusCollectorRegistry
    private let factory: DescribedMetricsFactory

    private let messagesIn: CoreMetrics.Counter
    private let bytesIn: CoreMetrics.Counter
    private let messagesOut: CoreMetrics.Counter
    private let bytesOut: CoreMetrics.Counter
    private let failedAttempts: [AttemptFailure.Kind: CoreMetrics.Counter]
    private let roundTripTimer: CoreMetrics.Timer
    private let drops: [DropReason: CoreMetrics.Counter]
    private let reconnects: [String: CoreMetrics.Counter]

    private let queueMessages: CoreMetrics.Gauge
    private let queueBytes: CoreMetrics.Gauge
    private let subscribers: CoreMetrics.Gauge
    private let clients: CoreMetrics.Gauge
    private let states: [ConnectionPhase: CoreMetrics.Gauge]
    private let stateSeconds: CoreMetrics.Gauge
    private let lastSeq: CoreMetrics.Gauge
    private let spoolFileBytes: CoreMetrics.Gauge
    private let spoolFsyncs: CoreMetrics.Counter

    /// The metric families: name, type, help. The docs table is checked against this list.
    public static let families: [(name: String, type: String, help: String)] = [
        ("wsbridge_upstream_messages_total", "counter", "WebSocket messages, by direction: in (from the upstream) and out (sent upstream)."),
        ("wsbridge_upstream_bytes_total", "counter", "Payload bytes of those messages, by direction."),
        ("wsbridge_reconnects_total", "counter", "Links opened again after one was lost, by the reason it was lost."),
        ("wsbridge_connect_failures_total", "counter", "Connection attempts that failed before the link opened, by reason (error, not_ready)."),
        ("wsbridge_dropped_messages_total", "counter", "Messages dropped, by reason (subscriber_queue_full, outbound_queue_full)."),
        ("wsbridge_outbound_queue_messages", "gauge", "Messages queued to send upstream while the link is not open."),
        ("wsbridge_outbound_queue_bytes", "gauge", "Bytes queued to send upstream while the link is not open."),
        ("wsbridge_subscribers", "gauge", "Local clients subscribed to upstream messages."),
        ("wsbridge_clients", "gauge", "Local clients connected, subscribed or not (not the one asking for metrics)."),
        ("wsbridge_link_state", "gauge", "1 for the link's current state, 0 for the others (label state)."),
        ("wsbridge_link_state_seconds", "gauge", "Seconds the link has been in its current state."),
        ("wsbridge_last_seq", "gauge", "The sequence number of the last upstream message fanned out."),
        ("wsbridge_heartbeat_rtt_seconds", "histogram", "Heartbeat round trips: ping sent to pong received."),
        ("wsbridge_spool_file_bytes", "gauge", "Size of the durable spool's file (queue.spool; 0 when it is off)."),
        ("wsbridge_spool_fsyncs_total", "counter", "fdatasyncs of the durable spool (queued sends that arrive together share one)."),
        ("wsbridge_upstream_url", "gauge", "1 for the upstream URL the open link uses, 0 for the other configured ones (labels url, role)."),
    ]

    /// Upper bounds of the round-trip histogram's buckets.
    static let roundTripBuckets: [Duration] = [
        .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    public init() {
        let registry = PrometheusCollectorRegistry()
        let factory = DescribedMetricsFactory(
            registry: registry,
            help: Dictionary(uniqueKeysWithValues: Self.families.map { ($0.name, $0.help) }),
            durationBuckets: ["wsbridge_heartbeat_rtt_seconds": Self.roundTripBuckets]
        )
        self.registry = registry
        self.factory = factory
        self.messagesIn = CoreMetrics.Counter(label: "wsbridge_upstream_messages_total", dimensions: [("direction", "in")], factory: factory)
        self.messagesOut = CoreMetrics.Counter(label: "wsbridge_upstream_messages_total", dimensions: [("direction", "out")], factory: factory)
        self.bytesIn = CoreMetrics.Counter(label: "wsbridge_upstream_bytes_total", dimensions: [("direction", "in")], factory: factory)
        self.bytesOut = CoreMetrics.Counter(label: "wsbridge_upstream_bytes_total", dimensions: [("direction", "out")], factory: factory)
        self.failedAttempts = Dictionary(
            uniqueKeysWithValues: AttemptFailure.Kind.allCases.map {
                ($0, CoreMetrics.Counter(label: "wsbridge_connect_failures_total", dimensions: [("reason", $0.rawValue)], factory: factory))
            }
        )
        self.roundTripTimer = CoreMetrics.Timer(label: "wsbridge_heartbeat_rtt_seconds", factory: factory)
        // One series per label value, made up front (a render shows them all, zero or not).
        self.drops = Dictionary(
            uniqueKeysWithValues: DropReason.allCases.map {
                ($0, CoreMetrics.Counter(label: "wsbridge_dropped_messages_total", dimensions: [("reason", $0.rawValue)], factory: factory))
            }
        )
        self.reconnects = Dictionary(
            uniqueKeysWithValues: Self.reconnectReasons.map {
                ($0, CoreMetrics.Counter(label: "wsbridge_reconnects_total", dimensions: [("reason", $0)], factory: factory))
            }
        )
        self.queueMessages = CoreMetrics.Gauge(label: "wsbridge_outbound_queue_messages", factory: factory)
        self.queueBytes = CoreMetrics.Gauge(label: "wsbridge_outbound_queue_bytes", factory: factory)
        self.subscribers = CoreMetrics.Gauge(label: "wsbridge_subscribers", factory: factory)
        self.clients = CoreMetrics.Gauge(label: "wsbridge_clients", factory: factory)
        self.states = Dictionary(
            uniqueKeysWithValues: ConnectionPhase.allCases.map {
                ($0, CoreMetrics.Gauge(label: "wsbridge_link_state", dimensions: [("state", $0.rawValue)], factory: factory))
            }
        )
        self.stateSeconds = CoreMetrics.Gauge(label: "wsbridge_link_state_seconds", factory: factory)
        self.lastSeq = CoreMetrics.Gauge(label: "wsbridge_last_seq", factory: factory)
        self.spoolFileBytes = CoreMetrics.Gauge(label: "wsbridge_spool_file_bytes", factory: factory)
        self.spoolFsyncs = CoreMetrics.Counter(label: "wsbridge_spool_fsyncs_total", factory: factory)
    }

    /// The link's message and byte counts at the last render.
    private let reported = NIOLockedValueBox(Traffic())

    struct Traffic: Sendable {
        var messagesIn: UInt64 = 0
        var bytesIn: UInt64 = 0
        var messagesOut: UInt64 = 0
        var bytesOut: UInt64 = 0
        var spoolFsyncs: UInt64 = 0
    }

    func attemptFailed(_ kind: AttemptFailure.Kind) {
        self.failedAttempts[kind]?.increment()
    }

    func roundTrip(_ rtt: Duration) {
        self.roundTripTimer.recordNanoseconds(rtt.nanoseconds)
    }

    func dropped(_ count: Int, _ reason: DropReason) {
        self.drops[reason]?.increment(by: Int64(count))
    }

    func reconnected(after reason: DisconnectReason?) {
        // A reason without its own series (a new case not yet listed) counts as "unknown".
        (self.reconnects[Self.reconnectReason(reason)] ?? self.reconnects["unknown"])?.increment()
    }

    /// The live state the gauges show, read on the daemon's loop just before a render.
    struct Snapshot {
        var phase: ConnectionPhase
        var secondsInPhase: Double
        var queueMessages: Int
        var queueBytes: Int
        var subscribers: Int
        var clients: Int
        var seq: UInt64
        var traffic: Traffic
        var spoolFileBytes = 0
        /// The configured URLs, primary first, and the one the open link uses.
        var urls: [String] = []
        var liveURL: String?
    }

    /// The Prometheus text format (version 0.0.4), with the gauges set from `snapshot`.
    func render(_ snapshot: Snapshot) -> [UInt8] {
        let now = snapshot.traffic
        let before = self.reported.withLockedValue { last in
            defer { last = now }
            return last
        }
        func gain(_ a: UInt64, _ b: UInt64) -> Int64 { Int64(clamping: a >= b ? a - b : 0) }
        self.messagesIn.increment(by: gain(now.messagesIn, before.messagesIn))
        self.bytesIn.increment(by: gain(now.bytesIn, before.bytesIn))
        self.messagesOut.increment(by: gain(now.messagesOut, before.messagesOut))
        self.bytesOut.increment(by: gain(now.bytesOut, before.bytesOut))
        self.spoolFsyncs.increment(by: gain(now.spoolFsyncs, before.spoolFsyncs))
        self.spoolFileBytes.record(snapshot.spoolFileBytes)
        self.queueMessages.record(snapshot.queueMessages)
        self.queueBytes.record(snapshot.queueBytes)
        self.subscribers.record(snapshot.subscribers)
        self.clients.record(snapshot.clients)
        for (phase, gauge) in self.states {
            gauge.record(phase == snapshot.phase ? 1 : 0)
        }
        self.stateSeconds.record(snapshot.secondsInPhase)
        for (i, url) in snapshot.urls.enumerated() {
            // The registry returns the series it already has for the same labels.
            CoreMetrics.Gauge(label: "wsbridge_upstream_url", dimensions: [("url", url), ("role", i == 0 ? "primary" : "fallback")], factory: self.factory)
                .record(url == snapshot.liveURL ? 1 : 0)
        }
        self.lastSeq.record(Double(snapshot.seq))
        return self.registry.emitToBuffer()
    }
}

/// swift-prometheus' factory, but every family gets its `# HELP` line (the stock factory
/// registers them without help text).
struct DescribedMetricsFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry
    let help: [String: String]
    let durationBuckets: [String: [Duration]]

    private func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: self.help[label] ?? "")
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        self.registry.makeCounter(descriptor: self.descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        self.registry.makeCounter(descriptor: self.descriptor(label), labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        if aggregate {
            return self.registry.makeValueHistogram(descriptor: self.descriptor(label), labels: dimensions, buckets: [0.001, 0.01, 0.1, 1, 10])
        }
        return self.registry.makeGauge(descriptor: self.descriptor(label), labels: dimensions)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        self.registry.makeGauge(descriptor: self.descriptor(label), labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        self.registry.makeDurationHistogram(
            descriptor: self.descriptor(label),
            labels: dimensions,
            buckets: self.durationBuckets[label] ?? DaemonMetrics.roundTripBuckets
        )
    }

    func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { self.registry.unregisterCounter(counter) }
    }

    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { self.registry.unregisterCounter(counter) }
    }

    func destroyRecorder(_ handler: any RecorderHandler) {
        if let gauge = handler as? Prometheus.Gauge { self.registry.unregisterGauge(gauge) }
    }

    func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { self.registry.unregisterGauge(gauge) }
    }

    func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { self.registry.unregisterDurationHistogram(histogram) }
    }
}
