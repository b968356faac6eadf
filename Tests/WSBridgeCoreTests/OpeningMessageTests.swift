import Testing
import WSBridgeCore
import WSBridgeProtocol

@Suite struct OpeningMessageTests {
    @Test func fillsTokenAndLastValues() throws {
        let m = try OpeningMessage(parsing: #"{"op":"auth","token":"${token}"}"#)
        #expect(m.usesToken)
        #expect(m.render(token: "s3cret", last: { _ in nil }) == #"{"op":"auth","token":"s3cret"}"#)
        let resume = try OpeningMessage(parsing: #"{"op":"resume","after":${last:offset},"ch":${last:data.channel}}"#)
        #expect(resume.lastPaths == ["offset", "data.channel"])
        #expect(resume.render(token: nil, last: { _ in nil }) == #"{"op":"resume","after":null,"ch":null}"#)
        let values = ["offset": "18446744073709551616", "data.channel": #""btc""#]
        #expect(resume.render(token: nil, last: { values[$0] }) == #"{"op":"resume","after":18446744073709551616,"ch":"btc"}"#)
    }

    @Test func literalDollarsStay() throws {
        let m = try OpeningMessage(parsing: "price $5, $${token} stays, ${token}")
        #expect(m.render(token: "T", last: { _ in nil }) == "price $5, ${token} stays, T")
        #expect(try OpeningMessage(parsing: "plain").parts == [.literal("plain")])
    }

    @Test func badPlaceholdersSayWhatToWrite() {
        #expect(throws: PlaceholderError.self) { try OpeningMessage(parsing: "${tokn}") }
        do {
            _ = try OpeningMessage(parsing: "${tokn}")
        } catch {
            #expect(error.description.contains("did you mean ${token}?"))
        }
        do {
            _ = try OpeningMessage(parsing: "${lsat:offset}")
        } catch {
            #expect(error.description.contains("did you mean ${last:PATH}?"))
        }
        do {
            _ = try OpeningMessage(parsing: "${last:}")
        } catch {
            #expect(error.description.contains("needs a dotted path"))
        }
        do {
            _ = try OpeningMessage(parsing: "${token")
        } catch {
            #expect(error.description.contains("not closed"))
        }
    }

    @Test func configurationReadsTheSessionKeys() throws {
        let loader = ConfigurationLoader(fileName: "s.toml")
        let config = try loader.load(
            text: """
                [upstream]
                on_open = ['{"op":"auth","token":"${token}"}', '{"op":"resume","after":${last:offset}}']
                ready_when = "type=authed"
                ready_timeout = "3s"
                [auth]
                token_file = "/run/credentials/token"
                [local]
                sticky_keys_per_client = 8
                sticky_keys = 100
                sticky_bytes = 4096
                """)
        #expect(config.upstream.onOpen.count == 2)
        #expect(config.upstream.readyWhen == Filter(field: "type", equals: "authed"))
        #expect(config.upstream.readyTimeout == .seconds(3))
        #expect(config.local.stickyKeysPerClient == 8 && config.local.stickyKeys == 100 && config.local.stickyBytes == 4096)
    }

    @Test func configurationErrorsNameTheLine() {
        let loader = ConfigurationLoader(fileName: "s.toml")
        do {
            _ = try loader.load(text: "[upstream]\nurl = \"ws://h/\"\non_open = ['{\"t\":\"${tokn}\"}']\n")
            Issue.record("expected an error")
        } catch {
            #expect(error.description.hasPrefix("s.toml:3: upstream.on_open"))
            #expect(error.description.contains("did you mean ${token}?"))
        }
        do {
            _ = try loader.load(text: "[upstream]\non_open = ['${token}']\n")
            Issue.record("expected an error")
        } catch {
            #expect(error.description.contains("${token} needs auth.token_file"))
        }
        do {
            _ = try loader.load(text: "[upstream]\nready_when = \"=x\"\n")
            Issue.record("expected an error")
        } catch {
            #expect(error.description.contains("s.toml:2: upstream.ready_when"))
        }
    }
}
