import Testing
import WSBridgeCore

/// The lease's rule (docs/fleet.md): a leader stands down only on another's name; a standby takes
/// the key only after reading it absent for a whole grace, or at once when it was released.
@Suite struct FleetLeaseMachineTests {
    static let ttl: Duration = .seconds(2)

    /// A key-value bucket with one key, its values kept `ttl` from their write, that can be cut.
    struct Bucket {
        var value: String?
        var revision: UInt64 = 0
        var writtenAt = MonotonicInstant(nanoseconds: 0)
        var up = true

        mutating func current(_ now: MonotonicInstant) -> String? {
            if self.value != nil, now - self.writtenAt >= FleetLeaseMachineTests.ttl { self.value = nil }
            return self.value
        }

        /// Does `action` as the driver does (a write, else a read) for `holder`.
        mutating func perform(_ action: FleetLeaseMachine.Action, holder: String, now: MonotonicInstant) -> FleetLeaseMachine.Observation? {
            guard action != .none else { return nil }
            guard self.up else { return .unreachable("timeout") }
            let value = self.current(now)
            var wrote = false
            switch action {
            case .renew(let revision): wrote = value != nil && revision == self.revision
            case .take(nil): wrote = value == nil
            case .take(let revision?): wrote = value == "" && revision == self.revision
            case .read, .none: break
            }
            if wrote {
                self.revision += 1
                self.value = holder
                self.writtenAt = now
                return .written(revision: self.revision)
            }
            guard let value else { return .missing }
            return .held(by: value, revision: self.revision)
        }
    }

    /// One tick of `machine` against `bucket`, its follow-up actions done at once: the changes.
    @discardableResult
    static func run(_ machine: inout FleetLeaseMachine, _ bucket: inout Bucket, at now: MonotonicInstant) -> [FleetLeaseMachine.Change] {
        var changes: [FleetLeaseMachine.Change] = []
        var action = machine.tick(now: now)
        var steps = 0
        while let observation = bucket.perform(action, holder: machine.holder, now: now) {
            let (change, next) = machine.observed(observation, now: now)
            if let change { changes.append(change) }
            action = next
            steps += 1
            #expect(steps < 5, "an action leads to at most a few at once, never a loop")
            if steps >= 5 { break }
        }
        return changes
    }

    static func at(_ ms: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: ms * 1_000_000) }

    /// Ticks a and b every third of a lease from `from` to `to` (ms), the bucket `up` or not.
    static func ticks(
        _ a: inout FleetLeaseMachine, _ b: inout FleetLeaseMachine, _ bucket: inout Bucket, from: UInt64, to: UInt64
    ) -> [String: [FleetLeaseMachine.Change]] {
        var changes: [String: [FleetLeaseMachine.Change]] = [:]
        var t = from
        while t < to {
            changes[a.holder, default: []] += Self.run(&a, &bucket, at: Self.at(t))
            changes[b.holder, default: []] += Self.run(&b, &bucket, at: Self.at(t + 10))
            t += 667
        }
        return changes
    }

    static func started() -> (FleetLeaseMachine, FleetLeaseMachine, Bucket) {
        var a = FleetLeaseMachine(holder: "a", grace: Self.ttl * 2)
        var b = FleetLeaseMachine(holder: "b", grace: Self.ttl * 2)
        var bucket = Bucket()
        // a first alone, until it leads; then b.
        var t: UInt64 = 0
        while !a.leading {
            Self.run(&a, &bucket, at: Self.at(t))
            t += 667
        }
        _ = Self.ticks(&a, &b, &bucket, from: t, to: t + 10_000)
        return (a, b, bucket)
    }

    @Test func aFreshBridgeLeadsOnlyAfterTheKeyWasAbsentForTheGraceAndTheOtherStandsBy() {
        var a = FleetLeaseMachine(holder: "a", grace: Self.ttl * 2)
        var bucket = Bucket()
        #expect(Self.run(&a, &bucket, at: Self.at(0)).isEmpty)
        #expect(!a.leading && a.absentSince == Self.at(0))
        #expect(Self.run(&a, &bucket, at: Self.at(3_999)).isEmpty, "absent for less than the grace")
        #expect(Self.run(&a, &bucket, at: Self.at(4_000)) == [.startedLeading(previous: nil)])
        #expect(a.leading && a.confirmed && bucket.value == "a")
        let (_, b, _) = Self.started()
        #expect(!b.leading && b.state == "standing by for a")
    }

    @Test func aLeaderWhoseBucketDoesNotAnswerKeepsLeadingAndWritesItAgainFirst() {
        var (a, b, bucket) = Self.started()
        #expect(a.leading)
        // All of NATS away for 30 s: a's renewals time out, the key expires meanwhile.
        bucket.up = false
        let during = Self.ticks(&a, &b, &bucket, from: 20_000, to: 50_000)
        #expect(during.values.allSatisfy { $0.isEmpty }, "nothing changes while nothing can be read")
        #expect(a.leading && a.lastError == "timeout")
        a.reconnected()
        b.reconnected()
        #expect(!a.confirmed, "a cold leader publishes nothing until its lease is written again")
        bucket.up = true
        let after = Self.ticks(&a, &b, &bucket, from: 50_000, to: 70_000)
        #expect(after.values.allSatisfy { $0.isEmpty }, "no takeover, and a does not take over from itself: \(after)")
        #expect(a.leading && a.confirmed && bucket.value == "a")
        #expect(!b.leading && b.state == "standing by for a")
    }

    @Test func theStandbyThatCameBackFirstStillWaitsForTheLeader() {
        var (a, b, bucket) = Self.started()
        bucket.up = false
        _ = Self.ticks(&a, &b, &bucket, from: 20_000, to: 50_000)
        bucket.up = true
        // b reads first, for most of a grace, a still away (its client reconnecting).
        var changes: [FleetLeaseMachine.Change] = []
        for t in stride(from: UInt64(50_000), to: 53_000, by: 667) { changes += Self.run(&b, &bucket, at: Self.at(t)) }
        #expect(changes.isEmpty && b.absentSince == Self.at(50_000))
        // a back within the grace: it writes at once on reading the key absent.
        #expect(Self.run(&a, &bucket, at: Self.at(53_100)).isEmpty)
        #expect(bucket.value == "a")
        let after = Self.ticks(&a, &b, &bucket, from: 53_767, to: 70_000)
        #expect(changes.isEmpty && after.values.allSatisfy { $0.isEmpty } && !b.leading && b.absentSince == nil && a.leading)
    }

    @Test func aStandbyTakesOverFromALeaderThatStaysAwayAndTheLeaderStandsDownOnItsName() {
        var (a, b, bucket) = Self.started()
        // a stops renewing (dead, or cut off alone): b reads the key absent, for the grace.
        var changes: [FleetLeaseMachine.Change] = []
        var t: UInt64 = 20_000
        while !b.leading, t < 40_000 {
            changes += Self.run(&b, &bucket, at: Self.at(t))
            t += 667
        }
        #expect(changes == [.startedLeading(previous: "a")])
        let took = t - 667
        #expect(Self.at(took) - Self.at(20_000) >= b.grace, "taken only after a whole grace of absence, read from 20 s on")
        // a comes back: another's name is proof.
        #expect(Self.run(&a, &bucket, at: Self.at(t)) == [.stoppedLeading(holder: "b")])
        #expect(!a.leading && a.state == "standing by for b")
    }

    @Test func anUnansweredReadStartsTheGraceAgain() {
        var b = FleetLeaseMachine(holder: "b", grace: Self.ttl * 2)
        var bucket = Bucket()
        Self.run(&b, &bucket, at: Self.at(0))
        bucket.up = false
        Self.run(&b, &bucket, at: Self.at(3_000))
        bucket.up = true
        #expect(Self.run(&b, &bucket, at: Self.at(4_500)).isEmpty, "absent since 4.5 s only")
        #expect(Self.run(&b, &bucket, at: Self.at(8_400)).isEmpty)
        #expect(Self.run(&b, &bucket, at: Self.at(8_500)) == [.startedLeading(previous: nil)])
    }

    @Test func aReleasedLeaseIsTakenAtOnceAndTheTakeoverNamesTheLastLeader() {
        var (a, b, bucket) = Self.started()
        // a's clean stop writes an empty name at its revision.
        bucket.value = ""
        bucket.revision += 1
        bucket.writtenAt = Self.at(20_000)
        _ = a
        #expect(Self.run(&b, &bucket, at: Self.at(20_100)) == [.startedLeading(previous: "a")])
        #expect(bucket.value == "b")
    }

    @Test func aWriteWhoseAnswerWasLostIsItsOwnLease() {
        var a = FleetLeaseMachine(holder: "a", grace: .seconds(4))
        _ = a.tick(now: Self.at(0))
        #expect(a.observed(.held(by: "a", revision: 7), now: Self.at(0)) == (.startedLeading(previous: nil), .none))
        _ = a.tick(now: Self.at(700))
        #expect(a.observed(.held(by: "a", revision: 9), now: Self.at(700)) == (nil, .none))
        #expect(a.revision == 9 && a.leading)
    }
}
