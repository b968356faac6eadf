// A debug (or fuzzing) build only, as the other targets.
#if DEBUG || FUZZING
    import WSBridgeCore
    import WSBridgeProtocol

    /// Each protocol's scan of an upstream message (issue 46) on any bytes: never out of them,
    /// and what it tells is what a parse of the message it names tells (`classify`'s id and end,
    /// or a broadcast). A text protocol's message the scan takes must read as one message; a JSON
    /// one may have a tail the scan never reads (then the parse fails and nothing is compared),
    /// and repeated keys (the scan takes the first, the parse the last) are left out.
    enum ProtocolScanCheck {
        static let codecs: [any AppProtocolCodec] = [
            JSONProtocol(), JSONProtocol(idPath: "data.id"), JSONRPC(), GraphQLTransportWS(), SocketIO(), STOMP(), NATS(inbox: "_INBOX.fuzz."),
        ]

        static func run(_ bytes: [UInt8]) {
            bytes.withUnsafeBytes { all in
                for codec in Self.codecs {
                    var offset = 0
                    // A text protocol's messages one after another, as the daemon's layer reads them.
                    while offset < all.count {
                        let rest = UnsafeRawBufferPointer(rebasing: all[offset...])
                        let scan = codec.scan(upstream: rest)
                        guard let end = Self.check(scan, in: rest, codec: codec) else { break }
                        guard end > 0 else { fatalError("\(codec.name): the scan took nothing: \(scan)") }
                        offset += end
                    }
                }
            }
        }

        /// Checks `scan` against a parse of the message it names; where the next one starts (nil: stop).
        static func check(_ scan: AppProtocolScan, in bytes: UnsafeRawBufferPointer, codec: any AppProtocolCodec) -> Int? {
            let message: Range<Int>
            let expected: UpstreamOp
            var at: Range<Int>?
            switch scan {
            case .unsure:
                return nil
            case .nothing(let end):
                guard end <= bytes.count else { fatalError("\(codec.name): \(scan) past the end (\(bytes.count))") }
                return end
            case .broadcast(let range):
                (message, expected) = (range, .broadcast)
            case .answer(let scanned, let final, let range):
                // An id the scan found but may not route (a string with an escape): the message is parsed.
                guard scanned.at.upperBound <= bytes.count, let id = scanned.wireID(in: bytes) else { return nil }
                (message, expected, at) = (range, .answer(id: id, final: final), scanned.at)
            case .event(let scanned, let range):
                guard scanned.at.upperBound <= bytes.count, let server = scanned.wireID(in: bytes) else { return nil }
                (message, expected, at) = (range, .event(subscription: server), scanned.at)
            }
            guard message.upperBound <= bytes.count, at.map({ message.contains($0.lowerBound) && $0.upperBound <= message.upperBound }) ?? true else {
                fatalError("\(codec.name): \(scan) out of the message or the bytes (\(bytes.count))")
            }
            let text = Array(bytes[message])
            guard case .success(let (views, used)) = codec.split(text[...]), views.count == 1, used == text.count else {
                if codec.isText && !(codec is SocketIO) {
                    fatalError("\(codec.name): the scan took \(String(decoding: text, as: UTF8.self).debugDescription), which does not read as one message")
                }
                return nil
            }
            let view = views[0].view
            if !codec.isText, Self.repeatsKeys(view) { return nil }
            let classified = codec.classify(fromUpstream: view)
            guard classified == expected else {
                fatalError("\(codec.name): the scan says \(expected) of \(String(decoding: text, as: UTF8.self).debugDescription), the parse \(classified)")
            }
            return message.upperBound
        }

        /// Whether an object in `json` has a key twice.
        static func repeatsKeys(_ json: JSONValue) -> Bool {
            switch json {
            case .object(let members): Set(members.map(\.0)).count != members.count || members.contains { Self.repeatsKeys($0.1) }
            case .array(let items): items.contains { Self.repeatsKeys($0) }
            default: false
            }
        }
    }
#endif
