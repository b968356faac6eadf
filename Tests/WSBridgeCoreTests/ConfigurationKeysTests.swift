import Testing

@testable import WSBridgeCore

/// What a reload reports comes from the keys themselves: each says, where it is read, whether a
/// change to it applies now, from the next connection, or after a restart.
@Suite struct ConfigurationKeysTests {
    let loader = ConfigurationLoader(fileName: "test.toml")

    func changes(from old: String, to new: String) throws -> [String: ReloadEffect] {
        let changed = Configuration.changedKeys(from: try self.loader.load(text: old), to: try self.loader.load(text: new))
        return Dictionary(uniqueKeysWithValues: changed.map { ($0.key, $0.reload) })
    }

    @Test func aChangedKeyIsReportedWithItsOwnEffect() throws {
        let old = """
            [upstream]
            url = "ws://127.0.0.1:1/a"
            [heartbeat]
            interval = "20s"
            [local]
            socket = "/tmp/a.sock"
            replay = 10
            """
        let new = """
            [upstream]
            url = "ws://127.0.0.1:1/b"
            [local]
            socket = "/tmp/b.sock"
            replay = 20
            [journal]
            dir = "/tmp/journal"
            """
        #expect(
            try self.changes(from: old, to: new) == [
                // Set, changed, and removed (back to its default) all count.
                "upstream.url": .nextConnection, "heartbeat.interval": .now, "local.socket": .restart, "local.replay": .now,
                "journal.dir": .restart,
            ])
    }

    @Test func aKeyThatDiffersFromItsSectionSaysSo() throws {
        // [upstream] applies from the next connection, but its protocol only after a restart;
        // [local] and [queue] apply now, but not the socket's settings or the spool.
        let changed = try self.changes(
            from: "[upstream]\nprotocol = \"raw\"\nconnect_timeout = \"5s\"\n[local]\nmax_line = 1024\nmax_clients = 10\n[queue]\nmax_messages = 5\n",
            to:
                "[upstream]\nprotocol = \"jsonrpc\"\nconnect_timeout = \"6s\"\n[local]\nmax_line = 2048\nmax_clients = 11\n[queue]\nmax_messages = 6\nspool = \"/tmp/s\"\n"
        )
        #expect(
            changed == [
                "upstream.protocol": .restart, "upstream.connect_timeout": .nextConnection, "local.max_line": .restart, "local.max_clients": .now,
                "queue.max_messages": .now, "queue.spool": .restart,
            ])
    }

    @Test func theSameFileChangesNothing() throws {
        let text = """
            [upstream]
            url = "ws://127.0.0.1:1/"
            protocol = "json"
            headers = { Authorization = "Bearer x" }
            [protocol]
            id = "id"
            [[protocol.reply]]
            when = "ping"
            send = '{"pong":1}'
            """
        #expect(try self.changes(from: text, to: text).isEmpty)
    }
}
