import Foundation
import Testing
import WSBridgeProtocol

/// A server of Tests/peers on `port` (0: any), once it says `listening PORT`; and its port.
func pythonPeer(_ script: String, port: Int, _ arguments: [String] = []) async throws -> (ManagedProcess, Int) {
    let process = try ManagedProcess(Paths.python, ["-u", "\(Paths.root)/Tests/peers/\(script)", "--port", "\(port)"] + arguments, name: script)
    guard let line = await process.stdout.wait(timeout: .seconds(30), { $0.hasPrefix("listening ") }), let bound = Int(line.dropFirst(10)) else {
        process.stop()
        throw TestFailure("\(script) did not start: \(process.stderr.text)")
    }
    return (process, bound)
}

/// A daemon speaking `upstream.protocol = name` to the peer at `url` (`settings`: the lines of
/// its [protocol] section), once its link is open; and its socket.
func protocolDaemon(_ dir: TemporaryDirectory, url: String, protocol name: String, settings: String = "") async throws -> (ManagedProcess, String) {
    let socket = dir.file("d.sock")
    let config = try writeDaemonConfig(
        dir, "wsbridged", url: url, socket: socket, upstream: "protocol = \"\(name)\"", extra: settings.isEmpty ? "" : "[protocol]\n\(settings)")
    let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "debug"])
    guard await daemon.awaitLink(.open) else {
        daemon.stop()
        throw TestFailure("no open link: \(daemon.stderr.text)")
    }
    return (daemon, socket)
}

/// Events numbered 1, 2, 3... on each connection (a new connection's start again at 1): how many
/// numbers a consumer missed, and how many it got twice, within connections. The count starts at
/// the first number seen (an app that joins a subscription already running did not miss what
/// came before it).
func lostAndDuplicated(_ numbers: [Int]) -> (lost: Int, duplicated: Int) {
    var lost = 0
    var duplicated = 0
    var last: Int?
    for n in numbers {
        guard let previous = last, n != 1 else {
            last = n
            continue
        }
        if n <= previous { duplicated += 1 } else { lost += n - previous - 1 }
        last = n
    }
    return (lost, duplicated)
}
