import Testing
import WSBridgeCore
import WSBridgeProtocol

@Suite struct StickyRegistryTests {
    var registry = StickyRegistry(limits: .init(keysPerClient: 2, keys: 3, bytes: 100))

    mutating func register(_ key: String, _ text: String, _ holder: StickyRegistry.Holder, leave: String? = nil) -> Result<
        (StickyRegistry.Registered, holders: Int), StickyRegistry.RegisterError
    > {
        self.registry.register(key: key, payload: .text(text), onUnstick: leave, holder: holder, pid: 7, uid: 1000, nowMillis: 1)
    }

    @Test mutating func sharedKeysSendOnceAndLeaveWithTheLastHolder() throws {
        #expect(try self.register("trades", "sub t", .client(1), leave: "unsub t").get() == (.added, 1))
        #expect(try self.register("trades", "sub t", .client(2)).get() == (.joined, 2))
        #expect(try self.register("trades", "sub t", .client(2)).get() == (.unchanged, 2))
        #expect(try self.register("own", "sub o", .client(1)).get() == (.added, 1))
        #expect(self.registry.ordered.map(\.key) == ["trades", "own"])
        // Client 1 goes: its own key leaves, the shared one stays with client 2.
        let gone = self.registry.clientGone(1)
        #expect(gone.map(\.key) == ["own"])
        #expect(self.registry.entry("trades")?.holds.map(\.holder) == [.client(2)])
        #expect(try self.registry.release(key: "trades", client: 2, scope: nil, leave: nil).get() == .removed(leave: "unsub t"))
        #expect(self.registry.isEmpty && self.registry.bytes == 0)
    }

    @Test mutating func aDifferentTextIsAConflictUnlessOnlyThisHolderHasIt() throws {
        _ = try self.register("k", "v1", .client(1)).get()
        #expect(try self.register("k", "v2", .client(1)).get() == (.replaced, 1))
        #expect(self.registry.entry("k")?.payload == .text("v2"))
        _ = try self.register("k", "v2", .client(2)).get()
        guard case .failure(.conflict(let hold)) = self.register("k", "v3", .client(1)) else {
            Issue.record("expected a conflict")
            return
        }
        #expect(hold.holder == .client(2) && hold.pid == 7)
    }

    @Test mutating func boundsHold() throws {
        _ = try self.register("a", "1", .client(1)).get()
        _ = try self.register("b", "2", .client(1)).get()
        #expect(throws: StickyRegistry.RegisterError.tooManyForClient(limit: 2)) { try self.register("c", "3", .client(1)).get() }
        _ = try self.register("c", "3", .daemon).get()
        #expect(throws: StickyRegistry.RegisterError.tooManyKeys(limit: 3)) { try self.register("d", "4", .client(2)).get() }
        _ = try self.registry.release(key: "c", client: 0, scope: .daemon, leave: nil).get()
        #expect(throws: StickyRegistry.RegisterError.tooManyBytes(limit: 100, used: 4, needed: 101)) {
            try self.register("d", String(repeating: "x", count: 100), .client(2)).get()
        }
    }

    @Test mutating func releaseTakesTheClientsHoldThenTheDaemons() throws {
        _ = try self.register("k", "v", .daemon).get()
        _ = try self.register("k", "v", .client(5)).get()
        #expect(try self.registry.release(key: "k", client: 5, scope: nil, leave: nil).get() == .stillHeld(holders: 1))
        #expect(try self.registry.release(key: "k", client: 9, scope: nil, leave: "bye").get() == .removed(leave: "bye"))
        #expect(throws: StickyRegistry.ReleaseError.unknownKey) { try self.registry.release(key: "k", client: 9, scope: nil, leave: nil).get() }
        _ = try self.register("c", "v", .client(5)).get()
        guard case .failure(.notHolder) = self.registry.release(key: "c", client: 6, scope: nil, leave: nil) else {
            Issue.record("another client's key must not be released")
            return
        }
    }

    @Test mutating func restoredDaemonKeysGoFirst() throws {
        var other = StickyRegistry(limits: .init(keysPerClient: 1, keys: 1, bytes: 10))
        other.restore([.restored(key: "kept", payload: .text("resubscribe"), onUnstick: nil, pid: 1, uid: 0, sinceMillis: 2)])
        #expect(other.daemonScoped.map(\.key) == ["kept"])
        #expect(other.bytes == "kept".utf8.count + "resubscribe".utf8.count)
    }
}

extension StickyRegistryTests {
    /// The store writes its file only when what the daemon-scope keys hold changed.
    @Test mutating func theDaemonRevisionMovesOnlyWithTheDaemonScopeKeys() throws {
        var revision = self.registry.daemonRevision
        func moved(_ registry: StickyRegistry) -> Bool {
            defer { revision = registry.daemonRevision }
            return registry.daemonRevision != revision
        }
        _ = try self.register("c", "client only", .client(1)).get()
        #expect(!moved(self.registry), "a client-scope key is not in the file")
        _ = try self.register("d", "daemon", .daemon).get()
        #expect(moved(self.registry))
        _ = try self.register("d", "daemon", .daemon).get()
        #expect(!moved(self.registry), "the same text again changes nothing")
        _ = try self.register("d", "daemon", .client(2)).get()
        #expect(!moved(self.registry), "a client joining keeps the daemon's part")
        _ = try self.register("d", "daemon", .daemon, leave: "bye").get()
        #expect(moved(self.registry), "a new leave text is in the file")
        _ = self.registry.release(key: "d", client: 2, scope: .client, leave: nil)
        #expect(!moved(self.registry))
        _ = self.registry.release(key: "d", client: 9, scope: .daemon, leave: nil)
        #expect(moved(self.registry))
        _ = self.registry.clientGone(1)
        #expect(!moved(self.registry))
    }
}
