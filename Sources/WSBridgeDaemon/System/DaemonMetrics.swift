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

    let registry: PrometheusCollectorRegistry
    private let factory: DescribedMetricsFactory

    private let messagesIn: CoreMetrics.Counter
    private let bytesIn: CoreMetrics.Counter
    private let messagesOut: CoreMetrics.Counter
    private let bytesOut: CoreMetrics.Counter
    private let failedAttempts: [AttemptFailure.Kind: CoreMetrics.Counter]
    private let roundTripTimer: CoreMetrics.Timer
    private let drops: [DropReason: CoreMetrics.Counter]
    private let reconnects: [ReconnectReason: CoreMetrics.Counter]

    private let queueMessages: CoreMetrics.Gauge
    private let queueBytes: CoreMetrics.Gauge
    private let subscribers: CoreMetrics.Gauge
    private let clients: CoreMetrics.Gauge
    private let states: [ConnectionPhase: CoreMetrics.Gauge]
    private let stateSeconds: CoreMetrics.Gauge
    private let lastSeq: CoreMetrics.Gauge
    private let spoolFileBytes: CoreMetrics.Gauge
    private let spoolFsyncs: CoreMetrics.Counter
    private let journalFsyncs: CoreMetrics.Counter
    private let notJournaled: CoreMetrics.Counter
    private let journalGauges: [(MetricFamily, CoreMetrics.Gauge)]
    private let processCPU: CoreMetrics.FloatingPointCounter
    private let processGauges: [(MetricFamily, CoreMetrics.Gauge)]
    /// The CPU seconds at the last render (the counter advances by the difference).
    private let reportedCPU = NIOLockedValueBox(0.0)

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
        func counter(_ family: MetricFamily, _ value: String? = nil) -> CoreMetrics.Counter {
            precondition(family.type == .counter)
            return CoreMetrics.Counter(label: family.name, dimensions: value.map { [(family.labels[0].name, $0)] } ?? [], factory: factory)
        }
        func gauge(_ family: MetricFamily, _ value: String? = nil) -> CoreMetrics.Gauge {
            precondition(family.type == .gauge)
            return CoreMetrics.Gauge(label: family.name, dimensions: value.map { [(family.labels[0].name, $0)] } ?? [], factory: factory)
        }
        self.messagesIn = counter(.upstreamMessages, "in")
        self.messagesOut = counter(.upstreamMessages, "out")
        self.bytesIn = counter(.upstreamBytes, "in")
        self.bytesOut = counter(.upstreamBytes, "out")
        // One series per label value, made up front (a render shows them all, zero or not).
        self.failedAttempts = Dictionary(uniqueKeysWithValues: AttemptFailure.Kind.allCases.map { ($0, counter(.connectFailures, $0.rawValue)) })
        self.roundTripTimer = CoreMetrics.Timer(label: MetricFamily.heartbeatRTT.name, factory: factory)
        self.drops = Dictionary(uniqueKeysWithValues: DropReason.allCases.map { ($0, counter(.droppedMessages, $0.rawValue)) })
        self.reconnects = Dictionary(uniqueKeysWithValues: ReconnectReason.allCases.map { ($0, counter(.reconnects, $0.rawValue)) })
        self.queueMessages = gauge(.outboundQueueMessages)
        self.queueBytes = gauge(.outboundQueueBytes)
        self.subscribers = gauge(.subscribers)
        self.clients = gauge(.clients)
        self.states = Dictionary(uniqueKeysWithValues: ConnectionPhase.allCases.map { ($0, gauge(.linkState, $0.rawValue)) })
        self.stateSeconds = gauge(.linkStateSeconds)
        self.lastSeq = gauge(.lastSeq)
        self.spoolFileBytes = gauge(.spoolFileBytes)
        self.spoolFsyncs = counter(.spoolFsyncs)
        self.journalFsyncs = counter(.journalFsyncs)
        self.notJournaled = counter(.journalNotJournaled)
        self.journalGauges = [MetricFamily.journalBytes, .journalSegments, .journalOldestSeq, .journalNewestSeq, .journalStopped, .journalReplays].map {
            ($0, gauge($0))
        }
        CoreMetrics.Gauge(
            label: MetricFamily.buildInfo.name, dimensions: [("version", WSBridgeVersion.current), ("commit", WSBridgeVersion.commit ?? "")],
            factory: factory
        ).record(1)
        self.processCPU = CoreMetrics.FloatingPointCounter(label: MetricFamily.processCPUSeconds.name, dimensions: [], factory: factory)
        self.processGauges = [MetricFamily.processResidentMemory, .processVirtualMemory, .processOpenFDs, .processMaxFDs, .processStartTime].map {
            ($0, gauge($0))
        }
    }

    /// The process collector's figures, read now.
    private func recordProcess() {
        guard let stats = ProcessStats.read() else { return }
        let gain = self.reportedCPU.withLockedValue { last in
            defer { last = max(last, stats.cpuSeconds) }
            return max(0, stats.cpuSeconds - last)
        }
        self.processCPU.increment(by: gain)
        for (family, gauge) in self.processGauges {
            switch family {
            case .processResidentMemory: gauge.record(stats.residentBytes)
            case .processVirtualMemory: gauge.record(stats.virtualBytes)
            case .processOpenFDs: gauge.record(stats.openFDs)
            case .processMaxFDs: gauge.record(stats.maxFDs)
            default: gauge.record(stats.startTime)
            }
        }
    }

    struct Traffic: Sendable {
        var messagesIn: UInt64 = 0
        var bytesIn: UInt64 = 0
        var messagesOut: UInt64 = 0
        var bytesOut: UInt64 = 0
        var spoolFsyncs: UInt64 = 0
        var journalFsyncs: UInt64 = 0
        var notJournaled: UInt64 = 0
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
        self.reconnects[ReconnectReason(reason)]?.increment()
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
        var journal: StatusReport.Journal?
        /// The configured URLs, primary first, and the one the open link uses.
        var urls: [String] = []
        var liveURL: String?
    }

    /// The Prometheus text format (version 0.0.4), with the gauges set from `snapshot` and the
    /// counters advanced by what the link carried since `reported` (the counts at the last
    /// render, kept by the caller on the daemon's loop, and updated here).
    func render(_ snapshot: Snapshot, since reported: inout Traffic) -> [UInt8] {
        let now = snapshot.traffic
        let before = reported
        reported = now
        func gain(_ a: UInt64, _ b: UInt64) -> Int64 { Int64(clamping: a >= b ? a - b : 0) }
        self.messagesIn.increment(by: gain(now.messagesIn, before.messagesIn))
        self.bytesIn.increment(by: gain(now.bytesIn, before.bytesIn))
        self.messagesOut.increment(by: gain(now.messagesOut, before.messagesOut))
        self.bytesOut.increment(by: gain(now.bytesOut, before.bytesOut))
        self.spoolFsyncs.increment(by: gain(now.spoolFsyncs, before.spoolFsyncs))
        self.spoolFileBytes.record(snapshot.spoolFileBytes)
        self.journalFsyncs.increment(by: gain(now.journalFsyncs, before.journalFsyncs))
        self.notJournaled.increment(by: gain(now.notJournaled, before.notJournaled))
        for (family, gauge) in self.journalGauges {
            let j = snapshot.journal
            switch family {
            case .journalBytes: gauge.record(j?.bytes ?? 0)
            case .journalSegments: gauge.record(j?.segments ?? 0)
            case .journalOldestSeq: gauge.record(Double(j?.oldestSeq ?? 0))
            case .journalNewestSeq: gauge.record(Double(j?.newestSeq ?? 0))
            case .journalStopped: gauge.record(j?.stoppedReason == nil ? 0 : 1)
            default: gauge.record(j?.replaying ?? 0)
            }
        }
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
            CoreMetrics.Gauge(
                label: MetricFamily.upstreamURL.name, dimensions: [("url", url), ("role", i == 0 ? "primary" : "fallback")], factory: self.factory
            )
            .record(url == snapshot.liveURL ? 1 : 0)
        }
        self.lastSeq.record(Double(snapshot.seq))
        self.recordProcess()
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
