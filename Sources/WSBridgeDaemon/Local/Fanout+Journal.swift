import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A consumer catching up from the journal: where it reads, and whether a read is on its way.
final class JournalReplay {
    let client: LocalClient
    var cursor: Journal.Cursor
    /// Waiting for the writer to write what the fan-out numbered (see `join`).
    var waitsForWriter = false

    init(client: LocalClient, from seq: UInt64) {
        self.client = client
        self.cursor = Journal.Cursor(from: seq)
    }
}

@available(*, unavailable)
extension JournalReplay: Sendable {}

/// Replays from the journal (docs/journal.md): a consumer whose `since` is older than the
/// replay ring reads the journal, a chunk at a time off the event loop, each chunk half its
/// queue's bounds and the next one asked for only once its queue drained to half (its own
/// pace, no drops); live lines are held back from it meanwhile. When the reads reach the
/// journal's end, the ring (or the live feed itself) has the rest: those lines go out, and the
/// consumer joins the live feed on the same turn of the loop, with no gap and no duplicate.
extension Fanout {
    func replayFromJournal(_ client: LocalClient, after since: UInt64) {
        guard self.journal != nil else { return }
        self.endReplay(of: client)
        let replay = JournalReplay(client: client, from: since + 1)
        self.replays[client.id] = replay
        self.relist(client)
        self.step(replay)
    }

    /// Ends a client's replay, if it has one (it unsubscribed, subscribed again or left).
    func endReplay(of client: LocalClient) {
        guard !self.replays.isEmpty, self.replays.removeValue(forKey: client.id) != nil else { return }
        self.relist(client)
        client.subscription.whenQueueLow(nil)
        self.listenForWrites()
    }

    var replayingReaders: Int { self.replays.count }

    private func isCurrent(_ replay: JournalReplay) -> Bool {
        self.replays[replay.client.id] === replay
    }

    private func step(_ replay: JournalReplay) {
        guard let journal = self.journal, self.isCurrent(replay) else { return }
        let client = replay.client
        let options = Journal.LineOptions(inlineJSON: self.configuration.inlineJSON, filter: client.filter)
        let maxMessages = max(1, self.configuration.subscriberQueue / 2)
        let maxBytes = max(1, self.configuration.subscriberQueueBytes / 2)
        journal.read(replay.cursor, maxMessages: maxMessages, maxBytes: maxBytes, options: options).assumeIsolated().whenComplete { result in
            guard self.isCurrent(replay) else { return }
            guard case .success(let chunk) = result else {
                // The reader stopped: the daemon is stopping.
                self.endReplay(of: client)
                return
            }
            for item in chunk.items {
                switch item {
                case .message(let seq, let line?): client.deliver(line, seq: seq)
                case .message(_, nil), .raw: break
                case .gap(let gap): client.send(MessageLineEncoder.line(gap.json, allocator: self.allocator))
                }
            }
            replay.cursor = chunk.cursor
            if chunk.atEnd {
                self.join(replay)
            } else if client.queueIsLow {
                self.step(replay)
            } else {
                client.subscription.whenQueueLow { [weak self] in self?.step(replay) }
            }
        }
    }

    /// The journal is read to its end: what the fan-out numbered since is in the ring (or was
    /// never published): it goes out, and the client is live again. When the ring no longer
    /// has it, the writer is still writing it: the replay waits for the next write.
    private func join(_ replay: JournalReplay) {
        self.flush()
        let next = replay.cursor.expect
        let client = replay.client
        if next <= self.seq {
            let ringHasIt = self.ring.oldestSeq.map { $0 <= next } ?? false
            if !ringHasIt {
                guard let journal = self.journal, journal.isStopped else {
                    replay.waitsForWriter = true
                    self.listenForWrites()
                    return
                }
                // A stopped journal will not have them: say so, and go on from what the ring has.
                let resume = self.ring.oldestSeq ?? (self.seq + 1)
                let gap = GapLine(
                    stream: self.stream, reason: GapLine.notDurable, from: next, to: resume - 1, next: resume,
                    message: "never written to the journal, which is stopped (\(journal.statistics.stopped ?? "a failed write"); wsbridged logged it)")
                client.send(MessageLineEncoder.line(gap.json, allocator: self.allocator))
            }
            for entry in self.ring.entries where entry.seq >= next {
                let line = self.ringLine(entry)
                if let filter = client.filter {
                    guard Self.payload(ofLine: line, matches: filter) else { continue }
                }
                client.deliver(line, seq: entry.seq)
            }
        }
        self.replays[client.id] = nil
        self.relist(client)
        self.listenForWrites()
    }

    /// Hears of the writer's writes only while a replay waits for one (no hop per write else).
    private func listenForWrites() {
        guard let journal = self.journal else { return }
        let waiting = self.replays.values.filter(\.waitsForWriter).map(\.cursor.expect)
        guard let first = waiting.min() else {
            journal.whenWritten(nil)
            return
        }
        let bound = NIOLoopBound(self, eventLoop: self.eventLoop)
        journal.whenWritten { _ in bound.value.writerWrote() }
        // A write done before the handler was set is not missed.
        if journal.writtenThrough >= first {
            self.eventLoop.assumeIsolated().execute { self.writerWrote() }
        }
    }

    private func writerWrote() {
        for replay in self.replays.values where replay.waitsForWriter {
            replay.waitsForWriter = false
            self.step(replay)
        }
        self.listenForWrites()
    }
}

extension Fanout {
    /// A line for every subscriber, after what was numbered before it (a fleet's takeover).
    func announce(_ line: ByteBuffer) {
        self.flush()
        for client in self.allClients where client.subscribed {
            client.send(line)
        }
    }

    /// The fan-out's part of `status`: subscribers and clients (`asker`, a control connection,
    /// not counted among them), the stream and its seq, drops, the journal.
    func report(into report: inout StatusReport, askedBy asker: LocalClient?) {
        report.subscribers = self.subscriberCount
        report.clients = self.clientCount - (asker.map { $0.subscribed ? 0 : 1 } ?? 0)
        report.seq = self.seq
        report.drops = self.drops
        report.stream = self.stream
        guard let journal = self.journal else { return }
        let st = journal.statistics
        report.journal = .init(
            dir: journal.directory, fsync: journal.configuration.fsync.rawValue, state: st.stopped == nil ? "writing" : "stopped",
            stoppedReason: st.stopped, bytes: st.bytes, segments: st.segments, oldestSeq: st.oldestSeq, newestSeq: st.newestSeq,
            oldestTs: st.oldestMillis, newestTs: st.newestMillis, fsyncs: st.fsyncs, notJournaled: st.notJournaled,
            replaying: self.replayingReaders, opened: journal.recovered.opened)
    }
}

extension Fanout {
    /// A message the protocol layer routed to a fleet follower's app (`app`, FleetRemoteApps):
    /// numbered in order like a local app's, and published into the fleet's stream for that
    /// follower only (never journaled). False when `app` is no follower's.
    func deliverToFollower(_ app: AppID, data: ByteBuffer, receivedAtMillis: Int64) -> Bool {
        guard let fleet = self.fleet, let target = fleet.remoteApps.name(of: app) else { return false }
        guard fleet.publishesRouted else { return true }
        self.flush()
        let seq = self.takeSeq()
        fleet.publish([Journal.Entry(seq: seq, message: UpstreamMessage(kind: .text, data: data, receivedAtMillis: receivedAtMillis), to: target)])
        return true
    }
}
