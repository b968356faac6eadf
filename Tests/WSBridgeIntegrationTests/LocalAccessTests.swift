import Foundation
import Glibc
import Testing
import WSBridgeProtocol

/// Who may do what, by peer credentials; socket files and a live daemon's path.
@Suite(.serialized) struct LocalAccessTests {
    @Test(.enabled(if: getuid() == 0, "needs root to act as another user"))
    func anotherUserMayReadButNotWrite() async throws {
        let f = try await DaemonFixture(extraConfig: "mode = \"0666\"")
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: f.dir.path)
        let nobody = try socatAsNobody(f.socket)
        defer { nobody.stop() }
        let hello = await nobody.stdout.wait(containing: "\"type\":\"hello\"")
        #expect(hello?.contains("\"write\":false") == true, "\(nobody.stderr.text)")
        f.server.command("send for everyone")
        #expect(await nobody.stdout.wait(containing: "for everyone") != nil)
        nobody.send("{\"id\":\"w\",\"op\":\"send\",\"text\":\"sneaky\"}")
        let refused = await nobody.stdout.wait(containing: "\"id\":\"w\"").flatMap { try? JSONValue.parse($0) }
        #expect(refused?.value(at: "error.code") == "forbidden")
        #expect(refused?.value(at: "error.message")?.stringValue?.contains("access.write_uids") == true)
        nobody.send("{\"id\":\"r\",\"op\":\"status\"}")
        #expect(await nobody.stdout.wait(containing: "\"id\":\"r\",\"ok\":true") != nil)
        #expect(await f.server.event("message sneaky", timeout: .milliseconds(500)) == nil)
    }

    /// As the units run it: a daemon's user in the socket's group (Group=/SupplementaryGroups=)
    /// may give it the socket.
    @Test(.enabled(if: DaemonUser.switches, "needs root to run the daemon as a user in a second group"))
    func socketModeAndGroupAreApplied() async throws {
        let f = try await DaemonFixture(extraConfig: "mode = \"0620\"\ngroup = \"\(DaemonUser.appGroup)\"")
        let attributes = try FileManager.default.attributesOfItem(atPath: f.socket)
        #expect((attributes[.posixPermissions] as? Int) == 0o620)
        #expect((attributes[.groupOwnerAccountName] as? String) == DaemonUser.appGroup)
    }

    /// A group the daemon's user is not in: refused at start, with the ways to fix it.
    @Test(.enabled(if: DaemonUser.switches, "needs root to run the daemon as a user outside the group"))
    func aGroupTheDaemonIsNotInIsRefusedWithTheFix() async throws {
        let dir = try TemporaryDirectory()
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(dir, "wsbridged", url: "ws://127.0.0.1:1/", socket: socket, extra: "group = \"nogroup\"")
        let daemon = try ManagedProcess.daemon(["--config", config])
        #expect(await daemon.waitForExit() == 69)
        #expect(
            daemon.stderr.text.contains(
                "cannot give \(socket) to group nogroup: Operation not permitted; user \(DaemonUser.name) is not a member of group nogroup"),
            "\(daemon.stderr.text)")
        #expect(daemon.stderr.text.contains("SocketGroup=nogroup") && daemon.stderr.text.contains("SupplementaryGroups=nogroup"))
    }

    @Test(
        .enabled(if: getuid() == 0, "needs root to act as another user"),
        arguments: ["write_uids = [65534]", "write_groups = [\"nogroup\"]"]
    )
    func accessListsGrantWrites(_ grant: String) async throws {
        let f = try await DaemonFixture(extraConfig: "mode = \"0666\"\n[access]\n\(grant)")
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: f.dir.path)
        let nobody = try socatAsNobody(f.socket)
        defer { nobody.stop() }
        #expect(await nobody.stdout.wait(containing: "\"write\":true") != nil, "\(nobody.stdout.text) \(nobody.stderr.text)")
        nobody.send("{\"id\":\"w\",\"op\":\"send\",\"text\":\"granted\"}")
        #expect(await f.server.event("message granted") != nil)
    }

    @Test func aLiveDaemonsSocketIsNeverStolen() async throws {
        let f = try await DaemonFixture()
        let second = try ManagedProcess.daemon(["--url", f.server.url, "--socket", f.socket], name: "second")
        #expect(await second.waitForExit() == 69)
        #expect(second.stderr.text.contains("another wsbridged is listening on \(f.socket)"))
        // The first still serves.
        let c = try await f.client()
        c.send("{\"id\":\"st\",\"op\":\"status\"}")
        #expect(await c.reply("st")?["ok"] == true)
    }

    @Test func aStaleSocketFileIsReplaced() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("stale.sock")
        // A socket file nobody listens on, as a crashed daemon leaves it.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        _ = unixSocket(fd, path, bind)
        close(fd)
        DaemonUser.handOver(path)
        #expect(FileManager.default.fileExists(atPath: path))
        let server = try await UpstreamServer(.nio)
        let daemon = try ManagedProcess.daemon(["--url", server.url, "--socket", path])
        defer { daemon.stop() }
        #expect(await daemon.awaitReady(), "\(daemon.stderr.text)")
        _ = try SocketClient(path: path)
    }

    @Test func aRegularFileIsNotReplaced() async throws {
        let dir = try TemporaryDirectory()
        let path = try dir.write("not-a-socket", "data")
        let daemon = try ManagedProcess.daemon(["--url", "ws://127.0.0.1:1/", "--socket", path])
        #expect(await daemon.waitForExit() == 69)
        #expect(daemon.stderr.text.contains("exists and is not a socket"))
        #expect((try? String(contentsOfFile: path, encoding: .utf8)) == "data")
    }
}
