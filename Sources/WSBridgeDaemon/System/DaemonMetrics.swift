import CoreMetrics
import NIOConcurrencyHelpers
import Prometheus
import WSBridgeCore
import WSBridgeProtocol

/// The daemon's metrics, recorded through swift-metrics' API into a Prometheus registry of its
/// own (one per daemon: in-process tests never share counters, and nothing depends on the global
/// `MetricsSystem`). `render()` gives the Prometheus text format for the `metrics` op and the
/// HTTP endpoint. Every family is described once, in `MetricFamily`, and in docs/metrics.md
/// (checked against it).
///
/// Rare events (a reconnect, a failed attempt, drops, a round trip) are recorded where they
/// happen. The message and byte counters cost nothing per message: the link counts in plain
/// integers anyway, and each render adds what they gained since the last one. Gauges are set
/// from the live state just before each render, so an idle daemon does no metrics work at all.
package final class DaemonMetrics: Sendable {
    /// Why a message was dropped.
    package enum DropReason: String, CaseIterable, Sendable {
        /// A subscriber fell behind by more than `local.subscriber_queue` / `_bytes`: its oldest messages went.
        case subscriberQueueFull = "subscriber_queue_full"
        /// A send was refused: the outbound queue (`queue.max_messages` / `max_bytes`) was full.
        case outboundQueueFull = "outbound_queue_full"
    }

    /// A series: its family and its label's value (nil: a family without a fixed label).
    private struct Series: Hashable {
        var family: MetricFamily
        var value: String?
    }

    let registry: PrometheusCollectorRegistry
    private let factory: DescribedMetricsFactory
    /// Every family's series made up front, by how they are read.
    private let counters: [Series: CoreMetrics.Counter]
    private let gauges: [Series: CoreMetrics.Gauge]
    private let seconds: [MetricFamily: CoreMetrics.FloatingPointCounter]
    private let roundTripTimer: CoreMetrics.Timer
    /// The totals at the last render (`.total` and `.seconds` counters advance by the gain).
    /// What the last render read: each total, each seconds family, and each labelled counter
    /// series (by family and labels), to count on from.
    private let reported = NIOLockedValueBox<(totals: [Series: UInt64], seconds: [MetricFamily: Double], series: [String: Double])>(([:], [:], [:]))

    /// Upper bounds of the round-trip histogram's buckets.
    static let roundTripBuckets: [Duration] = [
        .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    package init() {
        let registry = PrometheusCollectorRegistry()
        let factory = DescribedMetricsFactory(
            registry: registry,
            help: Dictionary(uniqueKeysWithValues: MetricFamily.allCases.map { ($0.name, $0.help) }),
            durationBuckets: [MetricFamily.heartbeatRTT.name: Self.roundTripBuckets]
        )
        self.registry = registry
        self.factory = factory
        var counters: [Series: CoreMetrics.Counter] = [:]
        var gauges: [Series: CoreMetrics.Gauge] = [:]
        var seconds: [MetricFamily: CoreMetrics.FloatingPointCounter] = [:]
        // One series per label value, made up front (a render shows them all, zero or not).
        for family in MetricFamily.allCases {
            let values: [String?] = family.labels.first?.values ?? [nil]
            func dimensions(_ value: String?) -> [(String, String)] { value.map { [(family.labels[0].name, $0)] } ?? [] }
            switch family.declaration.reading {
            case .event, .total:
                for v in values {
                    counters[Series(family: family, value: v)] = CoreMetrics.Counter(label: family.name, dimensions: dimensions(v), factory: factory)
                }
            case .gauge:
                for v in values {
                    gauges[Series(family: family, value: v)] = CoreMetrics.Gauge(label: family.name, dimensions: dimensions(v), factory: factory)
                }
            case .seconds:
                seconds[family] = CoreMetrics.FloatingPointCounter(label: family.name, dimensions: [], factory: factory)
            case .observed, .series:
                break
            }
        }
        (self.counters, self.gauges, self.seconds) = (counters, gauges, seconds)
        self.roundTripTimer = CoreMetrics.Timer(label: MetricFamily.heartbeatRTT.name, factory: factory)
    }

    /// Counts an event of `family` (read `.event`), under its label's `value`.
    func count(_ family: MetricFamily, _ value: String? = nil, by n: Int = 1) {
        self.counters[Series(family: family, value: value)]?.increment(by: Int64(n))
    }

    func attemptFailed(_ kind: AttemptFailure.Kind) {
        self.count(.connectFailures, kind.rawValue)
    }

    func roundTrip(_ rtt: Duration) {
        self.roundTripTimer.recordNanoseconds(rtt.nanoseconds)
    }

    func dropped(_ count: Int, _ reason: DropReason) {
        self.count(.droppedMessages, reason.rawValue, by: count)
    }

    func reconnected(after reason: DisconnectReason?) {
        self.count(.reconnects, ReconnectReason(reason).rawValue)
    }

    /// The Prometheus text format (version 0.0.4): every family read from `input` as its
    /// declaration says.
    func render(_ input: MetricFamily.Input) -> [UInt8] {
        var input = input
        input.process = ProcessStats.read()
        self.reported.withLockedValue { reported in
            for family in MetricFamily.allCases {
                let values: [String?] = family.labels.first?.values ?? [nil]
                switch family.declaration.reading {
                case .event, .observed:
                    break
                case .total(let read):
                    for v in values {
                        let series = Series(family: family, value: v)
                        let now = read(input, v)
                        let before = reported.totals[series] ?? 0
                        reported.totals[series] = now
                        self.counters[series]?.increment(by: Int64(clamping: now >= before ? now - before : 0))
                    }
                case .seconds(let read):
                    guard let now = read(input) else { break }
                    let before = reported.seconds[family] ?? 0
                    reported.seconds[family] = max(before, now)
                    self.seconds[family]?.increment(by: max(0, now - before))
                case .gauge(let read):
                    for v in values {
                        if let value = read(input, v) { self.gauges[Series(family: family, value: v)]?.record(value) }
                    }
                case .series(let read) where family.type == .counter:
                    for (labels, now) in read(input) {
                        // A connection's own count; one that started again from 0 (a pool's slot
                        // opened anew) counts on from where the series was.
                        let key = family.name + labels.map { "\u{1}\($0.0)=\($0.1)" }.joined()
                        let before = reported.series[key] ?? 0
                        reported.series[key] = now
                        CoreMetrics.Counter(label: family.name, dimensions: labels, factory: self.factory).increment(
                            by: Int64(now >= before ? now - before : now))
                    }
                case .series(let read):
                    for (labels, value) in read(input) {
                        // The registry returns the series it already has for the same labels.
                        CoreMetrics.Gauge(label: family.name, dimensions: labels, factory: self.factory).record(value)
                    }
                }
            }
        }
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
