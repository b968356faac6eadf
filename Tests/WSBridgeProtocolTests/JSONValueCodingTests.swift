import Testing

@testable import WSBridgeProtocol

/// The one mapping per type: keys written once, exact numbers, located errors.
@Suite struct JSONValueCodingTests {
    @Test func keysAreSnakeCaseInDeclarationOrderAndNilIsNullUnlessOmitted() throws {
        var status = StatusReport()
        (status.state, status.since, status.url, status.failedAttempts, status.traffic.messagesIn) = (.open, 1, "ws://h/", 2, UInt64.max)
        status.queue = .init(messages: 0, bytes: 0, maxMessages: 5, maxBytes: 6)
        let json = status.json.serialized
        #expect(json.hasPrefix(#"{"state":"open","since":1,"url":"ws://h/","reconnects":0,"failed_attempts":2,"rtt_ms":null,"#), "\(json)")
        // Exact: UInt64.max is not rounded through a Double.
        #expect(json.contains(#""messages_in":18446744073709551615"#))
        // A @Flattened part's fields are the object's own, where the part stands.
        #expect(
            json.contains(#""compression":false,"messages_in":18446744073709551615,"bytes_in":0,"messages_out":0,"bytes_out":0,"subscribers":0,"#), "\(json)")
        #expect(!json.contains("traffic") && !json.contains("service"), "\(json)")
        #expect(json.contains(#""queue":{"messages":0,"bytes":0,"max_messages":5,"max_bytes":6,"spool":null}"#))
        // retry_in_ms is left out while nil, written once set.
        #expect(!json.contains("retry_in_ms"))
        status.retryInMs = 250
        #expect(status.json.serialized.hasSuffix(#""retry_in_ms":250}"#))
        status.service.metricsUrl = "http://127.0.0.1:9/metrics"
        #expect(status.json.serialized.hasSuffix(#""retry_in_ms":250,"metrics_url":"http://127.0.0.1:9/metrics"}"#))
        #expect(try StatusReport(json: status.json) == status)
        let flat = try StatusReport(json: try JSONValue.parse(#"{"bytes_out":7,"last_reload":{"at":3,"restart_needed":["local.socket"]}}"#))
        #expect(flat.traffic.bytesOut == 7 && flat.service.lastReload?.restartNeeded == ["local.socket"] && flat.traffic.messagesIn == 0)
    }

    @Test func aWrongTypeIsAnErrorThatSaysWhereAndAMissingKeyReadsAsZero() throws {
        let wrong = try JSONValue.parse(#"{"state":"open","queue":{"max_bytes":"lots"}}"#)
        do throws(JSONValueDecodingError) {
            _ = try StatusReport(json: wrong)
            Issue.record("a string read as a byte count")
        } catch {
            #expect(error.path == "queue.max_bytes")
            #expect(error.description.contains(#"expected a whole number"#) && error.description.contains(#""lots""#), "\(error)")
        }
        let sparse = try StatusReport(json: try JSONValue.parse(#"{"state":"connecting"}"#))
        #expect(sparse.state == .connecting && sparse.queue.maxBytes == 0 && sparse.lastClose == nil && sparse.url == "")
        let unknownScope = try JSONValue.parse(#"{"keys":[{"key":"k","holders":[{"scope":"everyone"}]}]}"#)
        do throws(JSONValueDecodingError) {
            _ = try StickyListResult(json: unknownScope)
            Issue.record("an unknown scope was read")
        } catch {
            #expect(error.path == "keys.0.holders.0.scope", "\(error)")
        }
    }

    @Test func aFilterKeepsEqualsNullApartFromNoEquals() throws {
        let fieldOnly = SubscribeResult(subscribed: true, filter: Filter(field: "a", equals: nil))
        let equalsNull = SubscribeResult(subscribed: true, filter: Filter(field: "a", equals: .null))
        #expect(fieldOnly.json.serialized == #"{"subscribed":true,"filter":{"field":"a"}}"#)
        #expect(equalsNull.json.serialized == #"{"subscribed":true,"filter":{"field":"a","equals":null}}"#)
        #expect(try SubscribeResult(json: try JSONValue.parse(equalsNull.json.serialized)).filter?.equals == .null)
        let read = try SubscribeResult(json: try JSONValue.parse(fieldOnly.json.serialized))
        #expect(read.filter?.field == "a")
        #expect(read.filter.map { $0.equals == Optional<JSONValue>.none } == true)
    }

    @Test func jsonFieldsKeepTheirNumbersExactly() throws {
        let answer = RequestResult(seq: 1, payload: try JSONValue.parse(#"{"px":0.1000000000000000055511151231257827}"#))
        #expect(answer.json.serialized == #"{"seq":1,"kind":"text","json":{"px":0.1000000000000000055511151231257827}}"#)
        #expect(try RequestResult(json: try JSONValue.parse(answer.json.serialized)) == answer)
    }
}

extension JSONValueCodingTests {
    @Test func anInlineJSONNullStaysNull() throws {
        let line = MessageLine(seq: 3, ts: 4, kind: .text, data: nil, inlineJSON: .null)
        #expect(line.json.serialized == #"{"type":"message","seq":3,"ts":4,"kind":"text","json":null}"#)
        #expect(MessageLine(json: try JSONValue.parse(line.json.serialized)) == line)
    }
}
