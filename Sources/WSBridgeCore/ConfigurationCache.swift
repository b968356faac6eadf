import Synchronization

/// The configurations parsed lately, by file name and text: a reload of a text seen before
/// takes its configuration (or its error) from here instead of parsing it again.
///
/// The reason is memory, not speed. TOMLKit frees nothing it allocates for a parse (the document
/// tree, every key list and string it hands out): about 4 KB per parse of the shipped example,
/// for the life of the process. A daemon reloaded every few minutes by configuration
/// management would grow without end; with this cache it grows once per distinct text (the
/// soak measures it: docs/soak.md).
public final class ConfigurationCache: Sendable {
    /// The daemon's: what `wsbridged` loads at start and on every SIGHUP.
    public static let shared = ConfigurationCache(capacity: 8)

    private struct Entry {
        var fileName: String
        var text: String
        var requiresURL: Bool
        var result: Result<Configuration, ConfigurationError>
    }

    private let capacity: Int
    private let state = Mutex<(entries: [Entry], parses: Int)>(([], 0))

    public init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// How many texts were parsed (not taken from the cache), for tests.
    public var parses: Int { self.state.withLock { $0.parses } }

    /// `ConfigurationLoader(fileName:).load(text:)`, once per distinct (file name, text) among
    /// the last `capacity`.
    public func load(text: String, fileName: String, requiresURL: Bool = false) throws(ConfigurationError) -> Configuration {
        let hit = self.state.withLock { state in
            state.entries.first { $0.fileName == fileName && $0.text == text && $0.requiresURL == requiresURL }?.result
        }
        if let hit { return try hit.get() }
        let result = Result { () throws(ConfigurationError) -> Configuration in
            try ConfigurationLoader(fileName: fileName, requiresURL: requiresURL).load(text: text)
        }
        self.state.withLock { state in
            state.parses += 1
            state.entries.append(Entry(fileName: fileName, text: text, requiresURL: requiresURL, result: result))
            if state.entries.count > self.capacity { state.entries.removeFirst() }
        }
        return try result.get()
    }
}
