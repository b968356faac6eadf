import CNATS
import Foundation
import WSBridgeCore

/// `wsbridged --fleet-init` (docs/fleet.md, step 2): the stream and the lease bucket `[fleet]`
/// names, made where missing with its settings (`FleetSetup`), and where they exist compared with
/// them and left as they are. Idempotent: a second run makes nothing. Blocks (a command, not the
/// daemon).
public enum FleetInit {
    /// What it did, a line each; `differs`: something found is not what `[fleet]` says.
    public struct Report: Sendable {
        public var lines: [String] = []
        public var differs = false

        /// `what` exists, as `description` says: as [fleet] says, or how it differs (left as it is).
        mutating func found(_ what: String, _ description: String, differences: [String]) {
            guard !differences.isEmpty else {
                self.lines.append("\(what): already there, as [fleet] says (\(description)); nothing changed")
                return
            }
            self.differs = true
            self.lines.append(
                "\(what): already there, and differs from [fleet]: \(differences.joined(separator: "; ")); left as it is (change it with a JetStream client, or [fleet])"
            )
        }
    }

    public static func run(_ configuration: Configuration) throws -> Report {
        let fleet = configuration.fleet
        guard fleet.isOn else { throw FleetError("no [fleet] servers in the configuration: nothing to set up") }
        let library = try NATSLibrary.load(fleet.library).get()
        let api = library.api
        let handlers = NATSHandlers(library: library, connectionChanged: { _, _ in }, acknowledged: { _, _ in })
        let options = try library.options(fleet, name: "wsbridged --fleet-init", handlers: handlers)
        defer { api.natsOptions_Destroy(options) }
        // One try, and no callbacks: a command has nothing to tell of the connection's changes.
        try library.check(api.natsOptions_SetRetryOnFailedConnect(options, false, nil, nil), "the NATS client's options")
        try library.check(api.natsOptions_SetMaxReconnect(options, 0), "the NATS client's options")
        try library.check(api.natsOptions_SetDisconnectedCB(options, nil, nil), "the NATS client's options")
        try library.check(api.natsOptions_SetReconnectedCB(options, nil, nil), "the NATS client's options")
        try library.check(api.natsOptions_SetClosedCB(options, nil, nil), "the NATS client's options")
        var connection: OpaquePointer?
        try library.check(api.natsConnection_Connect(&connection, options), "connecting to \(fleet.servers.joined(separator: ", "))")
        guard let connection else { throw FleetError("connecting to \(fleet.servers.joined(separator: ", ")): no connection") }
        var jetStream: OpaquePointer?
        defer {
            if let jetStream { api.jsCtx_Destroy(jetStream) }
            api.natsConnection_Close(connection)
            api.natsConnection_Destroy(connection)
        }
        try library.check(api.natsConnection_JetStream(&jetStream, connection, nil), "JetStream")
        guard let jetStream else { throw FleetError("JetStream: no context") }
        let setup = FleetSetup(fleet)
        var report = Report()
        try Self.stream(setup.stream, name: fleet.stream, library, jetStream, into: &report)
        if let bucket = setup.bucket {
            try Self.bucket(bucket, name: fleet.leaseBucket, library, jetStream, into: &report)
        } else {
            report.lines.append("lease bucket \(fleet.leaseBucket): not needed (fleet.standby = \"none\")")
        }
        return report
    }

    private static func stream(_ wanted: FleetSetup.Stream, name: String, _ library: NATSLibrary, _ jetStream: OpaquePointer, into report: inout Report) throws
    {
        let api = library.api
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(rawValue: 0)
        let status = api.js_GetStreamInfo(&info, jetStream, name, nil, &code)
        if status == NATS_OK, let info {
            defer { api.jsStreamInfo_Destroy(info) }
            let config = info.pointee.Config.pointee
            let subjects = (0..<Int(config.SubjectsLen)).compactMap { config.Subjects[$0].map { String(cString: $0) } }
            let found = FleetSetup.Stream(
                subjects: subjects, replicas: Int(config.Replicas), duplicateWindow: .nanoseconds(config.Duplicates),
                fileStorage: config.Storage == js_FileStorage)
            report.found("stream \(name)", found.description, differences: wanted.differences(found))
            return
        }
        guard status == NATS_NOT_FOUND || code.rawValue == 10059 else {
            throw FleetError("the stream \(name): \(library.text(status)) (JetStream error \(code.rawValue))")
        }
        var config = jsStreamConfig()
        _ = api.jsStreamConfig_Init(&config)
        config.Storage = js_FileStorage
        config.Replicas = Int64(wanted.replicas)
        config.Duplicates = wanted.duplicateWindow.nanoseconds
        let subjects = wanted.subjects.map { strdup($0) }
        defer { for subject in subjects { free(subject) } }
        var pointers = subjects.map { UnsafePointer($0) }
        let made = name.withCString { name in
            config.Name = name
            return pointers.withUnsafeMutableBufferPointer { buffer in
                config.Subjects = buffer.baseAddress
                config.SubjectsLen = Int32(buffer.count)
                var created: UnsafeMutablePointer<jsStreamInfo>?
                defer { if let created { api.jsStreamInfo_Destroy(created) } }
                return api.js_AddStream(&created, jetStream, &config, nil, &code)
            }
        }
        try library.check(made, "making the stream \(name) (JetStream error \(code.rawValue))")
        report.lines.append("stream \(name): made (\(wanted.description))")
    }

    private static func bucket(_ wanted: FleetSetup.Bucket, name: String, _ library: NATSLibrary, _ jetStream: OpaquePointer, into report: inout Report) throws
    {
        let api = library.api
        var store: OpaquePointer?
        let found = api.js_KeyValue(&store, jetStream, name)
        if found == NATS_OK, let store {
            defer { api.kvStore_Destroy(store) }
            var status: OpaquePointer?
            try library.check(api.kvStore_Status(&status, store), "the lease bucket \(name)'s settings")
            guard let status else { throw FleetError("the lease bucket \(name)'s settings: none") }
            defer { api.kvStatus_Destroy(status) }
            let seen = FleetSetup.Bucket(ttl: .nanoseconds(api.kvStatus_TTL(status)), replicas: Int(api.kvStatus_Replicas(status)))
            report.found("lease bucket \(name)", seen.description, differences: wanted.differences(seen))
            return
        }
        var config = kvConfig()
        _ = api.kvConfig_Init(&config)
        config.History = 1
        config.TTL = wanted.ttl.nanoseconds
        config.Replicas = Int32(wanted.replicas)
        var made: OpaquePointer?
        let status = name.withCString { bucket in
            config.Bucket = bucket
            return api.js_CreateKeyValue(&made, jetStream, &config)
        }
        try library.check(status, "making the lease bucket \(name)")
        if let made { api.kvStore_Destroy(made) }
        report.lines.append("lease bucket \(name): made (\(wanted.description))")
    }
}
