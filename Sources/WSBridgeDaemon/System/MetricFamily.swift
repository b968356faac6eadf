import WSBridgeCore
import WSBridgeProtocol

/// Every metric family the daemon exports, declared once (`declaration`): its name, type,
/// labels, help and how its figures are read. The registry's families, their `# HELP` lines,
/// the series made up front (one per fixed label value), every render and the check of
/// docs/metrics.md come from here; the switch has no `default:`, so a new family cannot be
/// left half declared.
package enum MetricFamily: String, CaseIterable, Sendable {
    case upstreamMessages = "wsbridge_upstream_messages_total"
    case upstreamBytes = "wsbridge_upstream_bytes_total"
    case reconnects = "wsbridge_reconnects_total"
    case renewals = "wsbridge_renewals_total"
    case renewalDuplicates = "wsbridge_renewal_duplicates_total"
    case connectFailures = "wsbridge_connect_failures_total"
    case droppedMessages = "wsbridge_dropped_messages_total"
    case outboundQueueMessages = "wsbridge_outbound_queue_messages"
    case outboundQueueBytes = "wsbridge_outbound_queue_bytes"
    case subscribers = "wsbridge_subscribers"
    case clients = "wsbridge_clients"
    case refusedClients = "wsbridge_refused_clients_total"
    case webSocketApps = "wsbridge_websocket_apps"
    case linkState = "wsbridge_link_state"
    case linkStateSeconds = "wsbridge_link_state_seconds"
    case lastSeq = "wsbridge_last_seq"
    case heartbeatRTT = "wsbridge_heartbeat_rtt_seconds"
    case spoolFileBytes = "wsbridge_spool_file_bytes"
    case spoolFsyncs = "wsbridge_spool_fsyncs_total"
    case journalBytes = "wsbridge_journal_bytes"
    case journalSegments = "wsbridge_journal_segments"
    case journalOldestSeq = "wsbridge_journal_oldest_seq"
    case journalNewestSeq = "wsbridge_journal_newest_seq"
    case journalFsyncs = "wsbridge_journal_fsyncs_total"
    case journalNotJournaled = "wsbridge_journal_not_journaled_total"
    case journalStopped = "wsbridge_journal_stopped"
    case journalReplays = "wsbridge_journal_replays"
    case fleetConnected = "wsbridge_fleet_connected"
    case fleetAcknowledged = "wsbridge_fleet_acknowledged_total"
    case fleetLag = "wsbridge_fleet_lag"
    case fleetLost = "wsbridge_fleet_lost_total"
    case upstreamURL = "wsbridge_upstream_url"
    case connectionUp = "wsbridge_connection_up"
    case connectionSubscriptions = "wsbridge_connection_subscriptions"
    case connectionRTT = "wsbridge_connection_rtt_seconds"
    case connectionReceived = "wsbridge_connection_messages_received_total"
    case connectionSent = "wsbridge_connection_messages_sent_total"
    case connectionReconnects = "wsbridge_connection_reconnects_total"
    case buildInfo = "wsbridge_build_info"
    // The process collector, with the names Prometheus' client libraries give these figures.
    case processCPUSeconds = "process_cpu_seconds_total"
    case processResidentMemory = "process_resident_memory_bytes"
    case processVirtualMemory = "process_virtual_memory_bytes"
    case processOpenFDs = "process_open_fds"
    case processMaxFDs = "process_max_fds"
    case processStartTime = "process_start_time_seconds"

    package enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    /// A label: its name, and its values when they are a fixed set (nil: open, such as a URL).
    package struct Label: Sendable {
        package var name: String
        package var values: [String]?
    }

    /// What a render reads the figures from: the daemon's `status`, the configured URLs, the
    /// time, the process.
    struct Input {
        /// The connections: a pool's, else the one (as connection 1).
        var connections: [StatusReport.Connection] {
            let s = self.status
            return s.connections
                ?? [
                    StatusReport.Connection(
                        connection: 1, state: s.state, since: s.since, url: s.url, subscriptions: s.session?.stickyKeys ?? 0, keys: s.session?.stickyKeys ?? 0,
                        rttMs: s.rttMs, reconnects: s.reconnects, renewals: s.renewal?.renewals ?? 0, messagesIn: s.traffic.messagesIn,
                        messagesOut: s.traffic.messagesOut, waiting: s.limits?.waiting ?? 0, lastClose: s.lastClose)
                ]
        }

        var status: StatusReport
        /// The configured URLs, primary first.
        var urls: [String]
        var nowMillis: Int64
        var process: ProcessStats?
    }

    /// How a family's figures are read.
    enum Reading: Sendable {
        /// Counted where the event happens (`DaemonMetrics.count`), one series per label value.
        case event
        /// Observed where it happens (`DaemonMetrics.observe`): a histogram.
        case observed
        /// A counter that follows a total of the input, per label value (nil: no label): each
        /// render advances it by what the total gained since the last.
        case total(@Sendable (Input, String?) -> UInt64)
        /// A gauge set at each render, per label value (nil: no label).
        case gauge(@Sendable (Input, String?) -> Double?)
        /// A counter of seconds that follows a total of the input (the CPU time).
        case seconds(@Sendable (Input) -> Double?)
        /// Gauges whose label values come from the input (the configured URLs).
        case series(@Sendable (Input) -> [(labels: [(String, String)], value: Double)])
    }

    /// Everything about a family, in one place: the registry, the render, the `# HELP` lines
    /// and the check of docs/metrics.md read it from here.
    struct Declaration {
        var type: Kind
        var labels: [Label] = []
        var help: String
        var reading: Reading
    }

    package var name: String { self.rawValue }
    package var type: Kind { self.declaration.type }
    package var labels: [Label] { self.declaration.labels }
    package var help: String { self.declaration.help }

    private static let direction = [Label(name: "direction", values: ["in", "out"])]

    var declaration: Declaration {
        switch self {
        case .upstreamMessages:
            Declaration(
                type: .counter, labels: Self.direction, help: "WebSocket messages, by direction: in (from the upstream) and out (sent upstream).",
                reading: .total { i, d in d == "in" ? i.status.traffic.messagesIn : i.status.traffic.messagesOut })
        case .upstreamBytes:
            Declaration(
                type: .counter, labels: Self.direction, help: "Payload bytes of those messages, by direction.",
                reading: .total { i, d in d == "in" ? i.status.traffic.bytesIn : i.status.traffic.bytesOut })
        case .reconnects:
            Declaration(
                type: .counter, labels: [Label(name: "reason", values: ReconnectReason.allCases.map(\.rawValue))],
                help: "Links opened again after one was lost, by the reason it was lost.", reading: .event)
        case .renewals:
            Declaration(
                type: .counter, help: "Connections renewed with no gap (upstream.max_lifetime, upstream.renew_when).",
                reading: .total { i, _ in UInt64(i.status.renewal?.renewals ?? 0) })
        case .renewalDuplicates:
            Declaration(
                type: .counter, help: "Messages dropped during renewals' overlaps as the other connection's duplicates (upstream.dedupe).",
                reading: .total { i, _ in UInt64(i.status.renewal?.duplicatesDropped ?? 0) })
        case .connectFailures:
            Declaration(
                type: .counter, labels: [Label(name: "reason", values: AttemptFailure.Kind.allCases.map(\.rawValue))],
                help: "Connection attempts that failed before the link opened, by reason (error, not_ready).", reading: .event)
        case .droppedMessages:
            Declaration(
                type: .counter, labels: [Label(name: "reason", values: DaemonMetrics.DropReason.allCases.map(\.rawValue))],
                help: "Messages dropped, by reason (subscriber_queue_full, outbound_queue_full).", reading: .event)
        case .outboundQueueMessages:
            Declaration(
                type: .gauge, help: "Messages queued to send upstream while the link is not open.", reading: .gauge { i, _ in Double(i.status.queue.messages) })
        case .outboundQueueBytes:
            Declaration(
                type: .gauge, help: "Bytes queued to send upstream while the link is not open.", reading: .gauge { i, _ in Double(i.status.queue.bytes) })
        case .subscribers:
            Declaration(type: .gauge, help: "Local clients subscribed to upstream messages.", reading: .gauge { i, _ in Double(i.status.subscribers) })
        case .clients:
            Declaration(
                type: .gauge, help: "Local clients connected, subscribed or not (not the one asking for metrics).",
                reading: .gauge { i, _ in Double(i.status.clients) })
        case .webSocketApps:
            Declaration(
                type: .gauge, help: "Apps connected to the WebSocket face ([local.websocket]; 0 when it is off).",
                reading: .gauge { i, _ in Double(i.status.websocket?.apps ?? 0) })
        case .refusedClients:
            Declaration(
                type: .counter, help: "Local clients refused at local.max_clients (or its reserved places) since the daemon started.",
                reading: .total { i, _ in i.status.refusedClients })
        case .linkState:
            Declaration(
                type: .gauge, labels: [Label(name: "state", values: ConnectionPhase.allCases.map(\.rawValue))],
                help: "1 for the link's current state, 0 for the others (label state).", reading: .gauge { i, s in i.status.state.rawValue == s ? 1 : 0 })
        case .linkStateSeconds:
            Declaration(
                type: .gauge, help: "Seconds the link has been in its current state.",
                reading: .gauge { i, _ in max(0, Double(i.nowMillis - i.status.since) / 1000) })
        case .lastSeq:
            Declaration(
                type: .gauge, help: "The sequence number of the last upstream message fanned out.", reading: .gauge { i, _ in Double(i.status.seq) })
        case .heartbeatRTT:
            Declaration(type: .histogram, help: "Heartbeat round trips: ping sent to pong received.", reading: .observed)
        case .spoolFileBytes:
            Declaration(
                type: .gauge, help: "Size of the durable spool's file (queue.spool; 0 when it is off).",
                reading: .gauge { i, _ in Double(i.status.queue.spool?.fileBytes ?? 0) })
        case .spoolFsyncs:
            Declaration(
                type: .counter, help: "fdatasyncs of the durable spool (queued sends that arrive together share one).",
                reading: .total { i, _ in i.status.queue.spool?.fsyncs ?? 0 })
        case .fleetConnected:
            Declaration(
                type: .gauge,
                help: "1 while the fleet's JetStream stream is reached ([fleet]: a bridge publishing, a follower following; 0 when NATS is away or it is off).",
                reading: .gauge { i, _ in i.status.fleet?.state == "connected" ? 1 : 0 })
        case .fleetAcknowledged:
            Declaration(
                type: .counter, help: "Messages JetStream acknowledged ([fleet]).", reading: .total { i, _ in UInt64(i.status.fleet?.acknowledged ?? 0) })
        case .fleetLag:
            Declaration(
                type: .gauge, help: "Messages numbered and not yet acknowledged by JetStream ([fleet]).",
                reading: .gauge { i, _ in Double(i.status.fleet?.lag ?? 0) })
        case .fleetLost:
            Declaration(
                type: .counter, help: "Messages never published: NATS was away past fleet.max_backlog_bytes.",
                reading: .total { i, _ in UInt64(i.status.fleet?.lost ?? 0) })
        case .journalBytes:
            Declaration(
                type: .gauge, help: "Bytes of the journal's segment files (journal.dir; 0 when it is off).",
                reading: .gauge { i, _ in Double(i.status.journal?.bytes ?? 0) })
        case .journalSegments:
            Declaration(type: .gauge, help: "The journal's segment files.", reading: .gauge { i, _ in Double(i.status.journal?.segments ?? 0) })
        case .journalOldestSeq:
            Declaration(
                type: .gauge, help: "The oldest seq the journal keeps (0 when it keeps none).",
                reading: .gauge { i, _ in Double(i.status.journal?.oldestSeq ?? 0) })
        case .journalNewestSeq:
            Declaration(
                type: .gauge, help: "The newest seq the journal has written (0 when none).",
                reading: .gauge { i, _ in Double(i.status.journal?.newestSeq ?? 0) })
        case .journalFsyncs:
            Declaration(type: .counter, help: "fdatasyncs of the journal.", reading: .total { i, _ in i.status.journal?.fsyncs ?? 0 })
        case .journalNotJournaled:
            Declaration(
                type: .counter, help: "Upstream messages never written to the journal (its writer behind by journal.buffer_bytes, or stopped).",
                reading: .total { i, _ in i.status.journal?.notJournaled ?? 0 })
        case .journalStopped:
            Declaration(
                type: .gauge, help: "1 while the journal is stopped by a failed write (a full disk), else 0.",
                reading: .gauge { i, _ in i.status.journal?.stoppedReason == nil ? 0 : 1 })
        case .journalReplays:
            Declaration(type: .gauge, help: "Consumers catching up from the journal now.", reading: .gauge { i, _ in Double(i.status.journal?.replaying ?? 0) })
        case .connectionUp:
            Declaration(
                type: .gauge, labels: [Label(name: "connection", values: nil)],
                help:
                    "1 for each upstream connection that is open, 0 for one that is not (label connection: 1, 2... with a pool, upstream.subscriptions_per_connection; else 1).",
                reading: .series { i in i.connections.map { ([("connection", "\($0.connection)")], $0.state == .open ? 1 : 0) } })
        case .connectionSubscriptions:
            Declaration(
                type: .gauge, labels: [Label(name: "connection", values: nil)],
                help: "The subscriptions (sticky keys, or their weight) each upstream connection carries.",
                reading: .series { i in i.connections.map { ([("connection", "\($0.connection)")], Double($0.subscriptions)) } })
        case .connectionRTT:
            Declaration(
                type: .gauge, labels: [Label(name: "connection", values: nil)],
                help: "Each upstream connection's last heartbeat round trip, in seconds (0: none measured).",
                reading: .series { i in
                    i.connections.map { c in ([("connection", "\(c.connection)")], (c.rttMs ?? 0) / 1000) }
                })
        case .connectionReceived, .connectionSent, .connectionReconnects:
            Self.perConnectionCounter(self)
        case .upstreamURL:
            Declaration(
                type: .gauge, labels: [Label(name: "url", values: nil), Label(name: "role", values: ["primary", "fallback"])],
                help: "1 for the upstream URL the open link uses, 0 for the other configured ones (labels url, role).",
                reading: .series { i in
                    i.urls.enumerated().map { n, url in
                        ([("url", url), ("role", n == 0 ? "primary" : "fallback")], i.status.state == .open && i.status.url == url ? 1 : 0)
                    }
                })
        case .buildInfo:
            Declaration(
                type: .gauge, labels: [Label(name: "version", values: nil), Label(name: "commit", values: nil)],
                help: "Always 1; the labels say which build runs: version, and the git commit it was built from (empty outside a checkout).",
                reading: .series { _ in [(labels: [("version", WSBridgeVersion.current), ("commit", WSBridgeVersion.commit ?? "")], value: 1)] })
        case .processCPUSeconds:
            Declaration(type: .counter, help: "User and system CPU time the daemon has used, in seconds.", reading: .seconds { $0.process?.cpuSeconds })
        case .processResidentMemory:
            Declaration(type: .gauge, help: "Resident memory of the daemon, in bytes.", reading: .gauge { i, _ in i.process.map { Double($0.residentBytes) } })
        case .processVirtualMemory:
            Declaration(type: .gauge, help: "Virtual memory of the daemon, in bytes.", reading: .gauge { i, _ in i.process.map { Double($0.virtualBytes) } })
        case .processOpenFDs:
            Declaration(type: .gauge, help: "File descriptors the daemon has open.", reading: .gauge { i, _ in i.process.map { Double($0.openFDs) } })
        case .processMaxFDs:
            Declaration(
                type: .gauge, help: "The daemon's limit of open file descriptors (RLIMIT_NOFILE).",
                reading: .gauge { i, _ in i.process.map { Double($0.maxFDs) } })
        case .processStartTime:
            Declaration(type: .gauge, help: "When the daemon started, in seconds since the Unix epoch.", reading: .gauge { i, _ in i.process?.startTime })
        }
    }
}

/// Why the link was lost before a reconnect: the `reason` label of `wsbridge_reconnects_total`.
package enum ReconnectReason: String, CaseIterable, Sendable {
    case serverClosed = "server_closed"
    case user
    case daemon
    case error
    case heartbeatTimeout = "heartbeat_timeout"
    case networkLost = "network_lost"
    case unknown

    init(_ reason: DisconnectReason?) {
        switch reason {
        case .serverClosed: self = .serverClosed
        case .userClosed: self = .user
        case .daemonStopped: self = .daemon
        case .error: self = .error
        case .heartbeatTimeout: self = .heartbeatTimeout
        case .networkLost: self = .networkLost
        case nil: self = .unknown
        }
    }
}

extension MetricFamily {
    /// A counter of each connection's own (a pool's connection that closes and opens again in its
    /// slot counts on from where its series was: `DaemonMetrics.render`).
    fileprivate static func perConnectionCounter(_ family: MetricFamily) -> Declaration {
        let (help, value): (String, @Sendable (StatusReport.Connection) -> Double) =
            switch family {
            case .connectionReceived: ("Messages each upstream connection received.", { Double($0.messagesIn) })
            case .connectionSent: ("Messages the daemon wrote on each upstream connection.", { Double($0.messagesOut) })
            default: ("Times each upstream connection opened again after it was lost.", { Double($0.reconnects) })
            }
        return Declaration(
            type: .counter, labels: [Label(name: "connection", values: nil)], help: help,
            reading: .series { i in i.connections.map { ([("connection", "\($0.connection)")], value($0)) } })
    }
}
