import Foundation
import WSBridgeProtocol

/// The daemon's events, as tests await them: what it tells systemd through NOTIFY_SOCKET
/// (sd_notify), the interface a supervisor reads, not its log. Every daemon a test starts gets a
/// listener (its own, or the one the test passes): READY=1 once it listens
/// (and again after each reload), RELOADING=1, STOPPING=1, and a STATUS= on every change of the
/// link's phase, whose first word is the phase ("open ws://127.0.0.1:8080, 2 subscribers").
/// `wsbridgectl status --json` of the daemon listening at `socket`: what it reports of itself.
func daemonStatus(_ socket: String) throws -> StatusReport {
    let r = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status", "--json"])
    guard r.status == 0 else { throw TestFailure("wsbridgectl status: \(r.stderr)") }
    return try StatusReport(json: try JSONValue.parse(r.stdout))
}

/// Reads `read` until `done` holds of what it read, for state that no event announces (a
/// server's own tables, a counter, a port that starts to listen); returns what it read last.
/// The one polling loop of the tests: every `every`, for at most `timeout` (generous: it bounds a
/// wait that ends as soon as the state is there, and is no measure of speed). On timeout it
/// throws, naming `what` and what it read last.
@discardableResult
func eventually<T>(
    _ what: String, timeout: Duration = .seconds(30), every: Duration = .milliseconds(50), _ read: () async throws -> T, until done: (T) -> Bool
) async throws -> T {
    let deadline = ContinuousClock.now + timeout
    var last = try await read()
    while !done(last) {
        guard ContinuousClock.now < deadline else {
            throw TestFailure("timed out after \(timeout) waiting for \(what); last read: \(String(describing: last).prefix(3000))")
        }
        try await Task.sleep(for: every)
        last = try await read()
    }
    return last
}

/// Asks status until `check` holds: for state no event announces (a client coming, the journal
/// stopping on its writer thread, a count). On timeout it says what status said last.
func awaitStatus(_ socket: String, _ what: String, timeout: Duration = .seconds(30), _ check: (StatusReport) -> Bool) async throws {
    try await eventually(what, timeout: timeout, { try? daemonStatus(socket) }, until: { $0.map(check) ?? false })
}

extension ManagedProcess {
    /// `command` run with a NOTIFY_SOCKET the test listens on: `events`, or one of its own
    /// unless `environment` names a socket already (one nobody reads, say).
    static func daemon(
        command: [String], environment: [String: String]? = nil, name: String? = "wsbridged", journalStream: Bool = false,
        events: DatagramListener? = nil
    ) throws -> ManagedProcess {
        var env = environment ?? ProcessInfo.processInfo.environment
        var events = events
        if events == nil && env["NOTIFY_SOCKET"] == nil {
            events = try DatagramListener(path: "/tmp/wsbridge-events-\(UUID().uuidString.prefix(8)).sock")
        }
        if let events { env["NOTIFY_SOCKET"] = events.path }
        return try ManagedProcess(command[0], Array(command.dropFirst()), environment: env, name: name, journalStream: journalStream, events: events)
    }

    /// Where the events stand now: pass it as `from` to wait for what comes after.
    var eventMark: Int { self.events?.messages.count ?? 0 }

    /// Waits for READY=1 (from `from` on): the daemon listens on its socket, or a reload is done.
    func awaitReady(from: Int = 0, timeout: Duration = .seconds(20)) async -> Bool {
        await self.awaitEvent(from: from, timeout: timeout) { $0 == "READY=1" }
    }

    /// Waits (from `from` on) for the link to reach `phase`.
    func awaitLink(_ phase: ConnectionPhase, from: Int = 0, timeout: Duration = .seconds(20)) async -> Bool {
        await self.awaitEvent(from: from, timeout: timeout) { $0.hasPrefix("STATUS=\(phase.rawValue) ") }
    }

    /// Waits for a notification with a field that `matches`.
    func awaitEvent(from: Int = 0, timeout: Duration = .seconds(20), _ matches: @escaping @Sendable (String) -> Bool) async -> Bool {
        guard let events = self.events else { return false }
        // Each datagram is one line: "MS FIELD | FIELD ...".
        let line = await events.messages.wait(from: from, timeout: timeout) { line in
            let fields = line.drop { $0 != " " }.dropFirst()
            return fields.components(separatedBy: " | ").contains(where: matches)
        }
        return line != nil
    }
}
