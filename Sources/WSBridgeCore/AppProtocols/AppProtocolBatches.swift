import WSBridgeProtocol

/// JSON-RPC 2.0 batches (its section 6): an app's array of calls goes through the protocol
/// layer one call at a time (each id rewritten, each subscription shared, as if sent alone), and
/// the answers to the calls with an id are held here until the last one came, then go to the
/// app as one array, in the order of its calls. A call the layer refuses, or an item that is no
/// request, is answered in its place with a JSON-RPC error. Notifications (no id) get nothing; a
/// batch of notifications only, no answer at all. Pure: the protocol layer (`AppProtocolLayer`)
/// feeds it what it would deliver to an app, and delivers what it gives back.
package struct AppProtocolBatches: Sendable {
    private var open: [AppID: [Batch]] = [:]
    private var lastNumber: UInt64 = 0

    private struct Batch: Sendable {
        var number: UInt64
        /// The id each answer comes back with, in the batch's order: a call's own; null for an
        /// item that is no request (answered with an error whose id is null).
        var ids: [JSONValue]
        var answers: [JSONValue?]
        var missing: Int
    }

    package init() {}

    package var isEmpty: Bool { self.open.isEmpty }

    /// The place each item of a batch has among its answers (nil: a notification, none).
    package static func slots(_ items: [JSONValue]) -> [Int?] {
        var next = 0
        return items.map { item in
            if case .object = item, item["method"] != nil, item["id"] == nil || item["id"] == .null { return nil }
            defer { next += 1 }
            return next
        }
    }

    /// Opens a batch for `app` of these items (`slots`): its number, for `fill`; nil when no
    /// item is answered (notifications only).
    package mutating func open(_ app: AppID, items: [JSONValue]) -> UInt64? {
        let ids: [JSONValue] = zip(items, Self.slots(items)).compactMap { item, slot in
            guard slot != nil else { return nil }
            if case .object = item, let id = item["id"] { return id }
            return .null
        }
        guard !ids.isEmpty else { return nil }
        self.lastNumber += 1
        self.open[app, default: []].append(
            Batch(number: self.lastNumber, ids: ids, answers: Array(repeating: nil, count: ids.count), missing: ids.count))
        return self.lastNumber
    }

    /// The outcome of an answer for `app`.
    package enum Taken: Equatable, Sendable {
        /// Not a batch's: deliver it as it is.
        case notBatched
        /// Held for its batch, which waits for more.
        case held
        /// The last answer of a batch: deliver this array instead.
        case complete(JSONValue)
    }

    /// Answers place `slot` of batch `number` of `app` (a call the layer refused, or an item that
    /// is no request).
    package mutating func fill(_ app: AppID, batch number: UInt64, slot: Int, with answer: JSONValue) -> Taken {
        guard var batches = self.open[app], let b = batches.firstIndex(where: { $0.number == number }),
            batches[b].answers.indices.contains(slot), batches[b].answers[slot] == nil
        else { return .notBatched }
        batches[b].answers[slot] = answer
        return self.answered(app, &batches, b)
    }

    /// `message`, about to go to `app`: whether a batch of `app` waits for it (a response, not a
    /// notification, whose id is one its oldest open batch still misses).
    package mutating func take(_ message: JSONValue, for app: AppID) -> Taken {
        guard var batches = self.open[app], message["method"] == nil, let id = message["id"], id != .null else { return .notBatched }
        for b in batches.indices {
            guard let slot = batches[b].ids.indices.first(where: { batches[b].answers[$0] == nil && batches[b].ids[$0].serializesLike(id) })
            else { continue }
            batches[b].answers[slot] = message
            return self.answered(app, &batches, b)
        }
        return .notBatched
    }

    private mutating func answered(_ app: AppID, _ batches: inout [Batch], _ b: Int) -> Taken {
        batches[b].missing -= 1
        guard batches[b].missing == 0 else {
            self.open[app] = batches
            return .held
        }
        let done = batches.remove(at: b)
        self.open[app] = batches.isEmpty ? nil : batches
        return .complete(.array(done.answers.map { $0 ?? .null }))
    }

    /// `app` went: its batches are dropped.
    package mutating func appLeft(_ app: AppID) { self.open[app] = nil }

    /// An item of a batch the layer refused (`reason`), answered in its place.
    package static func refusal(of item: JSONValue, _ reason: String) -> JSONValue {
        let id: JSONValue = if case .object = item, let id = item["id"] { id } else { .null }
        return ["jsonrpc": "2.0", "id": id, "error": ["code": -32600, "message": .string("wsbridged: \(reason)")]]
    }

    /// The answer to an empty batch (section 6: one error, not an array).
    package static var emptyBatch: JSONValue {
        ["jsonrpc": "2.0", "id": .null, "error": ["code": -32600, "message": "Invalid Request: an empty batch"]]
    }
}
