import Foundation
import Testing
import WSBridgeCore
import WSBridgeProtocol

/// An app of a text protocol (Socket.IO, STOMP, NATS) on the daemon's socket: it sends the
/// protocol's own text and reads the wire text of what comes to it (issue 34).
struct TextApp {
    let client: SocketClient

    static func connect(_ socket: String, _ name: String, of daemon: ManagedProcess? = nil) async throws -> TextApp {
        TextApp(client: try await SocketClient.connected(to: socket, name: name, daemon: daemon))
    }

    /// `send` of `text` (`sticky`: a sticky send under that key, `leave` its on_unstick).
    func send(_ text: String, request: String, sticky: String? = nil, leave: String? = nil) {
        var line: JSONValue = ["id": .string(request), "op": "send", "text": .string(text)]
        if let sticky { line = line.setting("sticky", to: .string(sticky)) }
        if let leave { line = line.setting("on_unstick", to: .string(leave)) }
        self.client.send(line.serialized)
    }

    /// `request` of `text`, answered by what carries its id; the reply.
    func request(_ text: String, id: String, timeout: Int = 20) async -> JSONValue? {
        let line: JSONValue = ["id": .string(id), "op": "request", "text": .string(text), "timeout": .number(JSONNumber(timeout))]
        self.client.send(line.serialized)
        return await self.client.reply(id, timeout: .seconds(Int64(timeout) + 10))
    }

    var mark: Int { self.client.lines.count }

    /// The wire texts of the messages received, from `from` on.
    func texts(from: Int = 0) -> [String] {
        self.client.lines.lines.dropFirst(from).compactMap { line in
            guard let m = try? JSONValue.parse(line), m["type"] == "message" else { return nil }
            return m["data"]?.stringValue
        }
    }

    /// Waits for a message whose wire text satisfies `predicate`.
    func wait(from: Int = 0, timeout: Duration = .seconds(20), _ predicate: @escaping @Sendable (String) -> Bool) async -> String? {
        let line = await self.client.lines.wait(from: from, timeout: timeout) { line in
            guard let m = try? JSONValue.parse(line), m["type"] == "message", let data = m["data"]?.stringValue else { return false }
            return predicate(data)
        }
        return line.flatMap { try? JSONValue.parse($0) }?["data"]?.stringValue
    }

    func status() async -> JSONValue? {
        let id = "st\(self.mark)"
        self.client.send(#"{"id":"\#(id)","op":"status"}"#)
        return await self.client.reply(id)
    }

    func close() { self.client.close() }
}
