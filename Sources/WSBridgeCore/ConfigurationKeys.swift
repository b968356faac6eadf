/// When a change to a key of the file takes effect on a running daemon (a reload, SIGHUP). Each
/// key says it where it is read: its section's reader gives its keys a default
/// (`ConfigurationReader.readers`) and a key that differs says so at its `read`.
public enum ReloadEffect: String, Sendable, Equatable {
    /// The reload applies it.
    case now
    /// The reload takes it, and the next connection uses it (`wsbridgectl reconnect` applies it now).
    case nextConnection
    /// Only a restart applies it.
    case restart
}

extension Configuration {
    /// A key the file set: its value as written, and when a change to it takes effect.
    public struct FileKey: Sendable, Equatable {
        public var value: String
        public var reload: ReloadEffect

        public init(value: String, reload: ReloadEffect) {
            self.value = value
            self.reload = reload
        }
    }

    /// The keys whose value differs between two loads of the file (set, changed, or removed to
    /// go back to their default), sorted, each with when the change takes effect.
    public static func changedKeys(from old: Configuration, to new: Configuration) -> [(key: String, reload: ReloadEffect)] {
        Set(old.fileKeys.keys).union(new.fileKeys.keys).sorted().compactMap { key in
            let (before, after) = (old.fileKeys[key], new.fileKeys[key])
            guard before?.value != after?.value, let reload = after?.reload ?? before?.reload else { return nil }
            return (key, reload)
        }
    }
}
