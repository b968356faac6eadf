import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// The calls waiting for answers, kept by their upstream id's number in a window of slots and by
/// their id beyond it: whatever the order of calls and answers, the table answers as a
/// dictionary of the same calls would, and its slots stay within the window.
@Suite struct AppProtocolCallTableTests {
    typealias Call = AppProtocolSessionCall

    static func call(_ n: UInt64, string: Bool = false, app: AppID = 1) -> Call {
        let upstream = string ? WireID(.string(String(n))) : WireID(.number(JSONNumber(n)))
        return Call(app: app, appID: WireID(.string("app-\(n)")), upstream: upstream)
    }

    static func scanned(_ table: AppProtocolCallTable, _ text: String, plain: Bool = false) -> Call? {
        Array(text.utf8).withUnsafeBytes { table.call(scanned: $0, plain: plain) }
    }

    /// Random calls and answers (in order, out of order, some never answered, some from a far
    /// range as a renewal's session gives, some not numbers at all) against a dictionary.
    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func itAnswersAsADictionaryOfTheSameCallsWould(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var table = AppProtocolCallTable()
        var model: [WireID: Call] = [:]
        var next: UInt64 = 0
        for step in 0..<40_000 {
            let roll = Int.random(in: 0..<100, using: &random)
            if roll < 45 || model.isEmpty {
                // A new call: the next number, now and then one from a far range or a text id.
                next += 1
                var call = Self.call(roll == 0 ? (1 << 39) + next : next, string: roll % 7 == 0)
                if roll == 1 { call.upstream = WireID(.string("inbox.\(next)")) }
                table.insert(call)
                model[call.upstream] = call
            } else if roll < 90 {
                // An answer: mostly to a recent call, now and then to an old one.
                let keys = Array(model.keys)
                let upstream = keys[Int.random(in: 0..<keys.count, using: &random)]
                #expect(table.call(upstream)?.upstream == upstream)
                #expect(table.remove(upstream)?.upstream == upstream)
                model[upstream] = nil
            } else {
                // An answer to nothing held (already answered, or never asked).
                let upstream = WireID(.number(JSONNumber(UInt64.random(in: 0...(next + 10), using: &random))))
                #expect(table.call(upstream)?.upstream == model[upstream]?.upstream)
            }
            #expect(table.slotCount <= AppProtocolCallTable.window)
            if step % 1_000 == 0 {
                #expect(table.count == model.count)
                #expect(Set(table.all.map(\.upstream)) == Set(model.keys))
            }
        }
        #expect(table.count == model.count)
        #expect(Set(table.all.map(\.upstream)) == Set(model.keys))
    }

    /// A call never answered does not hold the window: the calls after it are still kept by
    /// number, and it is still found.
    @Test func aCallNeverAnsweredMovesOutOfTheWindow() {
        var table = AppProtocolCallTable()
        table.insert(Self.call(1))
        for n in 2...UInt64(3 * AppProtocolCallTable.window) {
            table.insert(Self.call(n))
            #expect(table.remove(Self.call(n).upstream) != nil)
        }
        #expect(table.count == 1)
        #expect(table.call(Self.call(1).upstream)?.appID == Self.call(1).appID)
        let n = UInt64(3 * AppProtocolCallTable.window + 1)
        table.insert(Self.call(n))
        #expect(Self.scanned(table, String(n)) != nil, "a new call is kept by number again")
    }

    /// A scanned answer finds its call by number only when its form is the call's: a number for
    /// a number, a quoted string (or a text protocol's value) for a string, the number's own
    /// digits (no leading zero, no sign, no fraction). A call in the other form than the first
    /// call's is kept by its id: found by `call(_:)`, not by a scan.
    @Test func aScannedIDFindsItsCallOnlyInTheSameForm() {
        var numbers = AppProtocolCallTable()
        numbers.insert(Self.call(7))
        numbers.insert(Self.call(8, string: true))
        #expect(Self.scanned(numbers, "7")?.upstream == Self.call(7).upstream)
        #expect(Self.scanned(numbers, #""7""#) == nil)
        #expect(Self.scanned(numbers, "7", plain: true) == nil)
        #expect(Self.scanned(numbers, #""8""#) == nil && Self.scanned(numbers, "8") == nil)
        #expect(numbers.call(Self.call(8, string: true).upstream)?.upstream == Self.call(8, string: true).upstream)
        var strings = AppProtocolCallTable()
        strings.insert(Self.call(8, string: true))
        #expect(Self.scanned(strings, #""8""#)?.upstream == Self.call(8, string: true).upstream)
        #expect(Self.scanned(strings, "8", plain: true)?.upstream == Self.call(8, string: true).upstream)
        #expect(Self.scanned(strings, "8") == nil)
        for other in ["07", "-7", "7.0", "7e0", "", #""""#, "77777777777777777777"] {
            #expect(Self.scanned(numbers, other) == nil, "\(other)")
        }
        #expect(AppProtocolCallTable.number(WireID(.number(JSONNumber(0)))) == 0)
        #expect(AppProtocolCallTable.number(WireID(.string("a1"))) == nil)
    }
}
