import WSBridgeProtocol

/// A text protocol's stream across WebSocket messages (Socket.IO, STOMP, NATS): the start of a
/// message the last WebSocket message cut, kept until its end comes, up to a bound.
struct AppProtocolTextRemainder {
    private var bytes: [UInt8] = []

    var isEmpty: Bool { self.bytes.isEmpty }

    mutating func removeAll() { self.bytes.removeAll() }

    /// The whole messages in `more` after what is kept; keeps what they leave unfinished, at
    /// most `limit` bytes (`upstream.max_message_size`).
    mutating func split(_ more: UnsafeRawBufferPointer, codec: any AppProtocolCodec, limit: Int) -> Result<[AppProtocolMessage], AppProtocolSyntaxError> {
        self.bytes.append(contentsOf: more)
        switch codec.split(self.bytes[...]) {
        case .failure(let error):
            self.bytes.removeAll()
            return .failure(error)
        case .success(let (messages, consumed)):
            self.bytes.removeFirst(consumed)
            if self.bytes.count > limit {
                let size = self.bytes.count
                self.bytes.removeAll()
                return .failure(
                    AppProtocolSyntaxError("a \(codec.name) message has come to \(size) bytes without its end, past upstream.max_message_size (\(limit))"))
            }
            return .success(messages)
        }
    }
}

extension AppProtocolCodec {
    /// An app's text as this protocol's messages (their views), or why it is not: whole
    /// messages only.
    package func parse(app text: String) -> Result<[JSONValue], AppProtocolSyntaxError> {
        let bytes = Array(text.utf8)
        switch self.split(bytes[...]) {
        case .failure(let error): return .failure(error)
        case .success(let (messages, consumed)):
            guard consumed == bytes.count else {
                let rest = String(decoding: bytes[consumed...].prefix(60), as: UTF8.self)
                return .failure(AppProtocolSyntaxError("the text ends inside a \(self.name) message (\(rest.debugDescription)): send whole messages"))
            }
            guard !messages.isEmpty else { return .failure(AppProtocolSyntaxError("no \(self.name) message in the text")) }
            return .success(messages.map(\.view))
        }
    }
}
