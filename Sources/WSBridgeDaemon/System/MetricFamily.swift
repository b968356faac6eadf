import WSBridgeCore
import WSBridgeProtocol

/// Every metric family the daemon exports, with its name, type, labels and help, written once:
/// the registry's families, their `# HELP` lines, the series made up front (one per fixed label
/// value) and the check of docs/metrics.md all come from here.
package enum MetricFamily: String, CaseIterable, Sendable {
    case upstreamMessages = "wsbridge_upstream_messages_total"
    case upstreamBytes = "wsbridge_upstream_bytes_total"
    case reconnects = "wsbridge_reconnects_total"
    case connectFailures = "wsbridge_connect_failures_total"
    case droppedMessages = "wsbridge_dropped_messages_total"
    case outboundQueueMessages = "wsbridge_outbound_queue_messages"
    case outboundQueueBytes = "wsbridge_outbound_queue_bytes"
    case subscribers = "wsbridge_subscribers"
    case clients = "wsbridge_clients"
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
    case upstreamURL = "wsbridge_upstream_url"
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

    package var name: String { self.rawValue }

    package var type: Kind {
        switch self {
        case .upstreamMessages, .upstreamBytes, .reconnects, .connectFailures, .droppedMessages, .spoolFsyncs, .journalFsyncs, .journalNotJournaled,
            .processCPUSeconds:
            .counter
        case .heartbeatRTT: .histogram
        default: .gauge
        }
    }

    package var labels: [Label] {
        switch self {
        case .upstreamMessages, .upstreamBytes: [Label(name: "direction", values: ["in", "out"])]
        case .reconnects: [Label(name: "reason", values: ReconnectReason.allCases.map(\.rawValue))]
        case .connectFailures: [Label(name: "reason", values: AttemptFailure.Kind.allCases.map(\.rawValue))]
        case .droppedMessages: [Label(name: "reason", values: DaemonMetrics.DropReason.allCases.map(\.rawValue))]
        case .linkState: [Label(name: "state", values: ConnectionPhase.allCases.map(\.rawValue))]
        case .upstreamURL: [Label(name: "url", values: nil), Label(name: "role", values: ["primary", "fallback"])]
        case .buildInfo: [Label(name: "version", values: nil), Label(name: "commit", values: nil)]
        default: []
        }
    }

    package var help: String {
        switch self {
        case .upstreamMessages: "WebSocket messages, by direction: in (from the upstream) and out (sent upstream)."
        case .upstreamBytes: "Payload bytes of those messages, by direction."
        case .reconnects: "Links opened again after one was lost, by the reason it was lost."
        case .connectFailures: "Connection attempts that failed before the link opened, by reason (error, not_ready)."
        case .droppedMessages: "Messages dropped, by reason (subscriber_queue_full, outbound_queue_full)."
        case .outboundQueueMessages: "Messages queued to send upstream while the link is not open."
        case .outboundQueueBytes: "Bytes queued to send upstream while the link is not open."
        case .subscribers: "Local clients subscribed to upstream messages."
        case .clients: "Local clients connected, subscribed or not (not the one asking for metrics)."
        case .linkState: "1 for the link's current state, 0 for the others (label state)."
        case .linkStateSeconds: "Seconds the link has been in its current state."
        case .lastSeq: "The sequence number of the last upstream message fanned out."
        case .heartbeatRTT: "Heartbeat round trips: ping sent to pong received."
        case .spoolFileBytes: "Size of the durable spool's file (queue.spool; 0 when it is off)."
        case .spoolFsyncs: "fdatasyncs of the durable spool (queued sends that arrive together share one)."
        case .journalBytes: "Bytes of the journal's segment files (journal.dir; 0 when it is off)."
        case .journalSegments: "The journal's segment files."
        case .journalOldestSeq: "The oldest seq the journal keeps (0 when it keeps none)."
        case .journalNewestSeq: "The newest seq the journal has written (0 when none)."
        case .journalFsyncs: "fdatasyncs of the journal."
        case .journalNotJournaled: "Upstream messages never written to the journal (its writer behind by journal.buffer_bytes, or stopped)."
        case .journalStopped: "1 while the journal is stopped by a failed write (a full disk), else 0."
        case .journalReplays: "Consumers catching up from the journal now."
        case .upstreamURL: "1 for the upstream URL the open link uses, 0 for the other configured ones (labels url, role)."
        case .buildInfo: "Always 1; the labels say which build runs: version, and the git commit it was built from (empty outside a checkout)."
        case .processCPUSeconds: "User and system CPU time the daemon has used, in seconds."
        case .processResidentMemory: "Resident memory of the daemon, in bytes."
        case .processVirtualMemory: "Virtual memory of the daemon, in bytes."
        case .processOpenFDs: "File descriptors the daemon has open."
        case .processMaxFDs: "The daemon's limit of open file descriptors (RLIMIT_NOFILE)."
        case .processStartTime: "When the daemon started, in seconds since the Unix epoch."
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
