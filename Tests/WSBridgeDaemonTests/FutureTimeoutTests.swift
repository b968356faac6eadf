import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import WSBridgeDaemon

/// `orTimeout`: whichever comes first, and no timer left armed after the future completed.
@Suite struct FutureTimeoutTests {
    @Test func theTimerIsCancelledOnceTheFutureCompletes() throws {
        let loop = EmbeddedEventLoop()
        let promise = loop.makePromise(of: Void.self)
        let fired = NIOLockedValueBox(false)
        let done = promise.futureResult.orTimeout(.seconds(5), onTimeout: { fired.withLockedValue { $0 = true } })
        promise.succeed(())
        try done.wait()
        loop.advanceTime(by: .seconds(10))
        #expect(fired.withLockedValue { $0 } == false, "the timeout still fired after the future completed")
    }

    @Test func theTimeoutCompletesAFutureThatDoesNot() throws {
        let loop = EmbeddedEventLoop()
        let promise = loop.makePromise(of: Void.self)
        let fired = NIOLockedValueBox(false)
        let completed = NIOLockedValueBox(false)
        promise.futureResult.orTimeout(.seconds(5), onTimeout: { fired.withLockedValue { $0 = true } }).whenComplete { _ in
            completed.withLockedValue { $0 = true }
        }
        loop.advanceTime(by: .seconds(4))
        #expect(!completed.withLockedValue { $0 })
        loop.advanceTime(by: .seconds(1))
        #expect(completed.withLockedValue { $0 })
        #expect(fired.withLockedValue { $0 })
        promise.succeed(())
    }
}
