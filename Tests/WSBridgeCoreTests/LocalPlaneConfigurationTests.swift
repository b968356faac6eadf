import Foundation
import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

@Suite struct LocalPlaneConfigurationTests {
    let loader = ConfigurationLoader(fileName: "t.toml")

    @Test func localQueueAndAccessOptions() throws {
        let c = try self.loader.load(
            text: """
                [local]
                max_line = 4096
                subscriber_queue = 10
                subscriber_queue_bytes = 2048
                subscriber_queue_burst = "100ms"
                replay = 0
                replay_bytes = 65536
                inline_json = true
                max_clients = 20
                client_output_bytes = 8192
                send_buffer_bytes = 0
                lagging_send_buffer_bytes = 0
                max_pending_requests = 2
                max_pending_requests_total = 3
                filter_max_bytes = 32
                filter_max_depth = 4
                [queue]
                max_messages = 5
                max_bytes = 100
                [access]
                write_uids = [1000, 1001]
                write_groups = ["wsbridge"]
                """
        )
        #expect(c.local.maxLine == 4096)
        #expect(c.local.subscriberQueue == 10)
        #expect(c.local.subscriberQueueBytes == 2048)
        #expect(c.local.subscriberQueueBurst == .milliseconds(100))
        #expect(Configuration().local.subscriberQueueBurst == .milliseconds(250))
        #expect(try self.loader.load(text: "[local]\nsubscriber_queue_burst = 0").local.subscriberQueueBurst == .zero)
        #expect(c.local.replay == 0)
        #expect(c.local.replayBytes == 65536)
        #expect(c.local.inlineJSON)
        #expect(c.local.maxClients == 20)
        #expect(c.local.clientOutputBytes == 8192)
        #expect(c.local.sendBufferBytes == 0)
        #expect(c.local.laggingSendBufferBytes == 0)
        #expect(c.local.maxPendingRequests == 2)
        #expect(c.local.maxPendingRequestsTotal == 3)
        #expect(c.local.filterMaxBytes == 32)
        #expect(c.local.filterMaxDepth == 4)
        #expect(c.queue.maxMessages == 5)
        #expect(c.queue.maxBytes == 100)
        #expect(c.queue.spool == nil)
        #expect(c.queue.fsync == .always)
        #expect(c.access.writeUIDs == [1000, 1001])
        #expect(c.access.writeGroups == ["wsbridge"])
    }

    @Test func theSpoolIsOffUnlessADirectoryIsGiven() throws {
        let on = try self.loader.load(text: "[queue]\nspool = \"/var/lib/wsbridged/spool\"\nfsync = \"batch\"\n")
        #expect(on.queue.spool == "/var/lib/wsbridged/spool")
        #expect(on.queue.fsync == .batch)
        let off = try self.loader.load(text: "[queue]\nspool = \"\"\n")
        #expect(off.queue.spool == nil)
    }

    @Test func theJournalIsOffUnlessADirectoryIsGivenAndReadsEveryKey() throws {
        let off = try self.loader.load(text: "")
        #expect(off.journal == Configuration.Journal())
        #expect(off.journal.dir == nil && off.journal.fsync == .batch && off.journal.maxBytes == 1 << 30)
        let on = try self.loader.load(
            text: """
                [journal]
                dir = "/var/lib/wsbridged/journal"
                max_bytes = 2097152
                max_age = "90m"
                segment_bytes = 65536
                fsync = "always"
                fsync_interval = "250ms"
                buffer_bytes = 1048576
                """)
        #expect(on.journal.dir == "/var/lib/wsbridged/journal")
        #expect(on.journal.maxBytes == 2_097_152)
        #expect(on.journal.maxAge == .seconds(5400))
        #expect(on.journal.segmentBytes == 65536)
        #expect(on.journal.fsync == .always)
        #expect(on.journal.fsyncInterval == .milliseconds(250))
        #expect(on.journal.bufferBytes == 1 << 20)
    }

    @Test(arguments: [
        ("[journal]\ndir = \"journal\"", "journal.dir", "absolute directory path"),
        ("[journal]\nfsync = \"never\"", "journal.fsync", "\"batch\" (fdatasync at most every journal.fsync_interval"),
        ("[journal]\nsegment_bytes = 100", "journal.segment_bytes", "from 65536"),
        ("[journal]\nmax_bytes = 2097152\nsegment_bytes = 4194304", "journal.segment_bytes", "larger than journal.max_bytes"),
        ("[journal]\nmax_age = 0", "journal.max_age", "a duration > 0"),
        ("[local]\nmax_line = 10", "local.max_line", "1024 to"),
        ("[local]\nsubscriber_queue = 0", "local.subscriber_queue", "from 1"),
        ("[local]\nsubscriber_queue_burst = \"2m\"", "local.subscriber_queue_burst", "at most 60s"),
        ("[queue]\nmax_messages = -1", "queue.max_messages", "0 (no queueing)"),
        ("[local]\nmax_clients = 0", "local.max_clients", "from 1"),
        ("[local]\nclient_output_bytes = 100", "local.client_output_bytes", "from 4096"),
        ("[local]\nsend_buffer_bytes = 100", "local.send_buffer_bytes", "0 (the system's default) or at least 4096"),
        ("[local]\nsend_buffer_bytes = 134217728", "local.send_buffer_bytes", "to 67108864"),
        ("[local]\nlagging_send_buffer_bytes = 100", "local.lagging_send_buffer_bytes", "0 (none) or at least 4096"),
        ("[local]\nfilter_max_depth = 0", "local.filter_max_depth", "from 1"),
        ("[local]\nreplay_bytes = -1", "local.replay_bytes", "0 (off)"),
        ("[access]\nwrite_uids = 1000", "access.write_uids", "array of user ids"),
        ("[access]\nwrite_uids = [\"root\"]", "access.write_uids", "numeric user id"),
        ("[access]\nwrite_groups = [1]", "access.write_groups", "must be a string"),
        ("[queue]\nspool = \"var/lib/wsbridged\"", "queue.spool", "absolute directory path"),
        ("[queue]\nspool = 1", "queue.spool", "must be a string"),
        ("[queue]\nfsync = \"sometimes\"", "queue.fsync", "\"always\" (each queued send is fdatasync'd"),
    ])
    func errors(_ text: String, _ key: String, _ mentions: String) {
        do {
            _ = try self.loader.load(text: text)
            Issue.record("expected an error")
        } catch {
            #expect(error.key == key)
            #expect(error.description.contains(mentions), "\(error)")
        }
    }
}

// Friendly errors (issue 11).
