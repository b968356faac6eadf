import CNATS
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

/// What standing by takes of the publisher (docs/fleet.md): a message id that every hot bridge
/// gives the same message, and the takeover's announcement in the stream.
extension FleetPublisher {
    static let eventHeader = "Wsbridge-Event"
    static let takeover = "takeover"

    /// `Nats-Msg-Id` from the message itself: the values at `paths` as its bytes have them
    /// (joined by a byte JSON never has), or, when they are long or the message lacks one, a
    /// 128-bit FNV-1a digest of them (of the whole message when it lacks one), alike in every
    /// process (a Swift `Hasher` is seeded per process).
    static func messageID(_ data: ByteBuffer, paths: [JSONPathScan.Path]) -> String {
        data.withUnsafeReadableBytes { bytes in
            var parts: [UnsafeRawBufferPointer] = []
            for path in paths {
                switch JSONPathScan.scan(path, in: bytes) {
                case .found(let range): parts.append(UnsafeRawBufferPointer(rebasing: bytes[range]))
                case .missing, .unsure: return "m-" + Self.digest([bytes])
                }
            }
            let length = parts.reduce(0) { $0 + $1.count } + parts.count
            let printable = parts.allSatisfy { $0.allSatisfy { $0 > 0x20 && $0 < 0x7F } }
            guard length <= 120, printable else { return "d-" + Self.digest(parts) }
            return "v-" + parts.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "|")
        }
    }

    private static func digest(_ parts: [UnsafeRawBufferPointer]) -> String {
        var a: UInt64 = 0xcbf2_9ce4_8422_2325
        var b: UInt64 = 0x6c62_272e_07bb_0142
        for part in parts {
            for byte in part {
                a = (a ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
                b = (b ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
            }
            a = (a ^ 0xFF) &* 0x0000_0100_0000_01B3
            b = (b ^ 0xFE) &* 0x0000_0100_0000_01B3
        }
        return String(a, radix: 16) + String(b, radix: 16)
    }

    /// This bridge took over (`fleet.standby = "cold"`): a message in the stream before its
    /// first says so, for the followers to tell their apps of the gap. Waits for JetStream's
    /// acknowledgement (blocks a pool thread, at most `fleet.ack_timeout`). With `fleet.batch`,
    /// or in a stream of numbered messages, it is numbered after the last number the stream has,
    /// and expects the stream's last seq it read (read again when another message came between).
    func announceTakeover(leader: String, previous: String?) -> EventLoopFuture<Void> {
        guard let jetStream = self.jetStream else { return self.eventLoop.makeSucceededVoidFuture() }
        let library = self.library
        let subject = self.subject
        let wait = self.ackTimeout
        let stream = self.fleet.stream
        let batches = self.fleet.batch > 1
        let handle = UnsafeSendable(jetStream)
        return NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () throws -> Void in
            let api = library.api
            for attempt in 1...10 {
                var msg: OpaquePointer?
                try library.check(api.natsMsg_Create(&msg, subject, nil, nil, 0), "the takeover's message")
                guard let msg else { return }
                defer { api.natsMsg_Destroy(msg) }
                _ = api.natsMsgHeader_Set(msg, Self.eventHeader, Self.takeover)
                _ = api.natsMsgHeader_Set(msg, "Wsbridge-Leader", leader)
                if let previous { _ = api.natsMsgHeader_Set(msg, "Wsbridge-Previous", previous) }
                var options = jsPubOptions()
                options.MaxWait = wait
                // Numbered where the stream's messages are, or this bridge batches.
                let read = Result { try Self.streamEnd(library, handle.value, stream) }
                let numbered = batches || (try? read.get())?.numbered != nil
                if numbered {
                    let end = try read.get()
                    let number = FleetBatch.next(lastSeq: end.seq, numbered: end.numbered, known: nil)
                    _ = api.natsMsgHeader_Set(msg, Self.numberHeader, "\(number)")
                    options.ExpectLastSeq = end.seq
                }
                var ack: UnsafeMutablePointer<jsPubAck>?
                var code = jsErrCode(rawValue: 0)
                let status = api.js_PublishMsg(&ack, handle.value, msg, &options, &code)
                if let ack { api.jsPubAck_Destroy(ack) }
                // 10071: another message came after the read.
                if numbered, status != NATS_OK, code == jsErrCode(rawValue: 10071), attempt < 10 { continue }
                try library.check(status, "announcing the takeover in the stream")
                return
            }
        }
    }
}
