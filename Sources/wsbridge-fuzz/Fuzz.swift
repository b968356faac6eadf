// A debug (or fuzzing) build only: the targets reach the daemon's internals through @testable,
// which a release build does not allow (`swift build -c release` builds a stub, Replay.swift).
#if DEBUG || FUZZING
    import NIOCore
    import NIOEmbedded
    import WSBridgeCore
    import WSBridgeProtocol

    @testable import WSBridgeDaemon

    #if canImport(Glibc)
        import Glibc
    #endif

    /// libFuzzer's entry: every target of `scripts/fuzz` in one binary, chosen by the environment
    /// variable WSBRIDGE_FUZZ_TARGET (read once). Each target feeds the input to the daemon's own
    /// code for bytes from outside and checks properties, not only that nothing crashed: a failed
    /// property is a `fatalError`, which libFuzzer reports with the input that caused it.
    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
        let bytes = Array(UnsafeBufferPointer(start: data, count: size))
        switch FuzzTarget.current {
        case .request: RequestTarget.run(bytes)
        case .spool: SpoolTarget.run(bytes)
        case .journal: JournalTarget.run(bytes)
        case .config: ConfigTarget.run(bytes)
        case .frames: FramesTarget.run(bytes)
        case .handshake: HandshakeTarget.run(bytes)
        case .batch: BatchTarget.run(bytes)
        }
        return 0
    }

    enum FuzzTarget: String, CaseIterable {
        /// A client's request bytes: NDJSON framing, the JSON parser, `Request.decode`, filters.
        case request
        /// The spool file after its header: records, checksums, a torn or damaged tail.
        case spool
        /// A journal segment after its header: records, checksums, holes, a torn or damaged tail.
        case journal
        /// The configuration file (TOML text), and the daemon's command-line settings.
        case config
        /// The upstream byte stream after the upgrade (FramesTarget.swift).
        case frames
        /// The upgrade response and the proxies' replies (HandshakeTarget.swift).
        case handshake
        /// A batch of the fleet's stream, as a follower takes it apart (BatchTarget.swift).
        case batch

        static let current: FuzzTarget = {
            let name = getenv("WSBRIDGE_FUZZ_TARGET").map { String(cString: $0) } ?? ""
            guard let target = FuzzTarget(rawValue: name) else {
                fatalError("set WSBRIDGE_FUZZ_TARGET to one of: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return target
        }()
    }

    /// Every request line either decodes or is refused with one of the documented error codes; JSON
    /// that parses serializes to a text that parses to the same value.
    enum RequestTarget {
        static let limits = RequestLimits(filterMaxBytes: 256, filterMaxDepth: 16)

        static func run(_ bytes: [UInt8]) {
            // The same bytes as an upstream message, to every protocol's scan.
            ProtocolScanCheck.run(bytes)
            let channel = EmbeddedChannel()
            try? channel.pipeline.syncOperations.addHandlers([ByteToMessageHandler(NDJSONLineDecoder(maxLine: 4096)), LocalLines()])
            defer { _ = try? channel.finish() }
            _ = try? channel.writeInbound(ByteBuffer(bytes: bytes))
            while let line = try? channel.readInbound(as: LocalLine.self) {
                switch RequestDecoding.decode(line, limits: Self.limits) {
                case .none, .success?:
                    break
                case .failure(let error)?:
                    guard ErrorCode.allCases.contains(error.code), error.code != .internalError else {
                        fatalError("a request line was refused with \(error.code): \(error.message)")
                    }
                }
                if case .line(let buffer) = line, let json = try? JSONValue.parse(buffer.readableBytesView) {
                    let again: JSONValue
                    do {
                        again = try JSONValue.parse(json.serialized)
                    } catch {
                        fatalError("\(json.serialized) does not parse again: \(error)")
                    }
                    guard again == json else { fatalError("\(json.serialized) parses to another value") }
                }
                if case .line(let buffer) = line { PathScanCheck.run(buffer) }
            }
        }
    }

    /// `JSONPathScan` on a client's line: never out of the text; on JSON that parses, at the
    /// paths in it (and one that is not), what it finds is the value a parse finds there, and
    /// what it calls missing is not there (unsure is allowed: a key with an escape).
    enum PathScanCheck {
        static func run(_ buffer: ByteBuffer) {
            let json = try? JSONValue.parse(buffer.readableBytesView)
            var paths: [[JSONValue.PathComponent]] = [[.init("id")], [.init("filter"), .init("field")], [.init("0")]]
            if let json { paths += Self.paths(in: json, limit: 16) }
            buffer.withUnsafeReadableBytes { bytes in
                for path in paths {
                    let scanned = JSONPathScan.scan(path, in: bytes)
                    guard let json, !Self.hasRepeatedKeys(json, along: path) else { continue }
                    let expected = json.value(at: path)
                    switch scanned {
                    case .found(let range):
                        guard range.upperBound <= bytes.count, let value = try? JSONValue.parse(UnsafeRawBufferPointer(rebasing: bytes[range])),
                            value == expected
                        else { fatalError("the scan found \(range) at \(path.map(\.key)), not \(expected?.serialized ?? "nothing")") }
                    case .missing:
                        guard expected == nil else { fatalError("the scan missed \(path.map(\.key)): \(expected!.serialized)") }
                    case .unsure:
                        break
                    }
                }
            }
        }

        /// Paths to the values in `json`, breadth first, at most `limit`.
        static func paths(in json: JSONValue, limit: Int) -> [[JSONValue.PathComponent]] {
            var out: [[JSONValue.PathComponent]] = []
            var queue: [([JSONValue.PathComponent], JSONValue)] = [([], json)]
            while !queue.isEmpty, out.count < limit {
                let (path, value) = queue.removeFirst()
                switch value {
                case .object(let members): queue += members.map { (path + [.init($0.0)], $0.1) }
                case .array(let items): queue += items.enumerated().map { (path + [.init("\($0.offset)")], $0.element) }
                default: break
                }
                if !path.isEmpty { out.append(path) }
            }
            return out
        }

        /// Whether an object along `path` has a key twice (the scan takes the first, a parse the last).
        static func hasRepeatedKeys(_ json: JSONValue, along path: [JSONValue.PathComponent]) -> Bool {
            path.indices.contains { depth in
                guard case .object(let members)? = json.value(at: Array(path[..<depth])) else { return false }
                return Set(members.map(\.0)).count != members.count
            }
        }
    }

    /// Whatever follows the header, the reader keeps every whole record before the first bad one,
    /// never reads past the file, and a file rebuilt from what it kept reads back the same.
    enum SpoolTarget {
        static func run(_ bytes: [UInt8]) {
            var file = SpoolFormat.header()
            file.writeBytes(bytes)
            guard let contents = try? SpoolFormat.read(file) else { return }
            var rebuilt = SpoolFormat.header()
            for m in contents.messages {
                SpoolFormat.write(kind: m.kind, id: m.id, payload: m.payload, into: &rebuilt)
            }
            guard let again = try? SpoolFormat.read(rebuilt),
                again.messages.map(\.id) == contents.messages.map(\.id),
                again.messages.map(\.payload) == contents.messages.map(\.payload),
                again.skipped.isEmpty, again.truncatedAt == nil
            else { fatalError("the kept records do not read back the same") }
        }
    }

    /// Whatever follows a segment's header, the scan never reads past the file, ends where it says,
    /// and the records it keeps, written again, scan back the same with nothing skipped or cut.
    enum JournalTarget {
        static func run(_ bytes: [UInt8]) {
            let header = JournalFormat.header(.init(stream: 1, firstSeq: 1, createdMillis: 0))
            var file = header
            file.writeBytes(bytes)
            let scan = JournalFormat.scan(file, from: JournalFormat.headerSize)
            guard scan.end <= file.writerIndex, scan.cut.map({ $0.offset == scan.end }) ?? (scan.end == file.writerIndex) else {
                fatalError("the scan ends past the file, cuts elsewhere than where it stopped, or stops early without a cut")
            }
            guard scan.records.reduce(JournalFormat.headerSize, { $0 + $1.size }) <= scan.end else {
                fatalError("the kept records are larger than what was read")
            }
            var rebuilt = header
            for r in scan.records {
                JournalFormat.write(kind: r.kind, seq: r.seq, millis: r.millis, payload: r.payload, into: &rebuilt)
            }
            let again = JournalFormat.scan(rebuilt, from: JournalFormat.headerSize)
            guard again.cut == nil, again.skipped.isEmpty, again.end == rebuilt.writerIndex,
                again.records.map(\.seq) == scan.records.map(\.seq), again.records.map(\.kind) == scan.records.map(\.kind),
                again.records.map(\.millis) == scan.records.map(\.millis), again.records.map(\.payload) == scan.records.map(\.payload)
            else { fatalError("the kept records do not read back the same") }
        }
    }

    /// Any text is a configuration or an error that names the file and says what is wrong; the
    /// command-line settings take each line of the input as a flag's value with the same rules.
    enum ConfigTarget {
        static func run(_ bytes: [UInt8]) {
            guard let text = String(validating: bytes, as: UTF8.self) else { return }
            do {
                let configuration = try ConfigurationLoader(fileName: "fuzz.toml").load(text: text)
                guard configuration.local.reserved < configuration.local.maxClients || configuration.local.maxClients == 1 else {
                    fatalError("a configuration with local.reserved_clients >= local.max_clients was accepted")
                }
            } catch {
                guard error.description.hasPrefix("fuzz.toml"), !error.problem.isEmpty else {
                    fatalError("a configuration error without its file or problem: \(error)")
                }
            }
            for line in text.split(separator: "\n").prefix(8).map(String.init) {
                _ = try? CommandLineSettings.header(line)
                _ = try? CommandLineSettings.subprotocol(line)
                _ = try? CommandLineSettings.proxy(line)
                _ = try? CommandLineSettings.path(line, flag: "--ca-file", key: "tls.ca_file")
            }
        }
    }
#endif
