import CNATS
import Foundation
import WSBridgeCore

/// The NATS C client (libnats), loaded at run time when `[fleet]` is configured: its functions,
/// and the connection and JetStream context made from `[fleet]`'s settings. The client is
/// thread-safe; its callbacks run on its own threads (the owner hops to its event loop).
struct NATSLibrary: @unchecked Sendable {
    let api: wsb_nats_api

    /// Loads `file` (dlopen: a library name such as "libnats.so.3.4", or a path).
    static func load(_ file: String) -> Result<NATSLibrary, FleetError> {
        var error: UnsafePointer<CChar>?
        guard let api = wsb_nats_load(file, &error) else {
            let why = error.map { String(cString: $0) } ?? "unknown"
            return .failure(
                FleetError("[fleet] needs the NATS C client, and \(file) could not be loaded: \(why); install it (apt install libnats3.4) or set fleet.library")
            )
        }
        return .success(NATSLibrary(api: api.pointee))
    }

    /// The text of `status` (the client's own words).
    func text(_ status: natsStatus) -> String {
        self.api.natsStatus_GetText(status).map { String(cString: $0) } ?? "NATS status \(status.rawValue)"
    }

    /// `status`, checked: `what` and the client's text when it is not NATS_OK.
    func check(_ status: natsStatus, _ what: String) throws(FleetError) {
        guard status != NATS_OK else { return }
        throw FleetError("\(what): \(self.text(status))")
    }

    /// The client's options for `fleet`: its servers, credentials, TLS, and reconnecting
    /// forever (once a second) with the connection first tried in the background.
    func options(_ fleet: Configuration.Fleet, name: String, handlers: NATSHandlers) throws(FleetError) -> OpaquePointer {
        var options: OpaquePointer?
        try self.check(self.api.natsOptions_Create(&options), "the NATS client's options")
        guard let options else { throw FleetError("the NATS client's options: none made") }
        do {
            let servers = fleet.servers.map { strdup($0) }
            defer { for server in servers { free(server) } }
            var pointers = servers.map { UnsafePointer($0) }
            try self.check(self.api.natsOptions_SetServers(options, &pointers, Int32(pointers.count)), "fleet.servers")
            try self.check(self.api.natsOptions_SetName(options, name), "the NATS client's name")
            if let user = fleet.user, let password = fleet.password {
                try self.check(self.api.natsOptions_SetUserInfo(options, user, password), "fleet.user and fleet.password")
            }
            if let token = fleet.token { try self.check(self.api.natsOptions_SetToken(options, token), "fleet.token") }
            if let credentials = fleet.credentials {
                try self.check(self.api.natsOptions_SetUserCredentialsFromFiles(options, credentials, nil), "fleet.credentials (\(credentials))")
            }
            if fleet.caFile != nil || fleet.certFile != nil || fleet.servers.contains(where: { $0.hasPrefix("tls://") }) {
                try self.check(self.api.natsOptions_SetSecure(options, true), "TLS to the NATS servers")
            }
            if let ca = fleet.caFile { try self.check(self.api.natsOptions_LoadCATrustedCertificates(options, ca), "fleet.ca_file (\(ca))") }
            if let cert = fleet.certFile, let key = fleet.keyFile {
                try self.check(self.api.natsOptions_LoadCertificatesChain(options, cert, key), "fleet.cert_file and fleet.key_file")
            }
            try self.check(self.api.natsOptions_SetMaxReconnect(options, -1), "the NATS client's reconnects")
            try self.check(self.api.natsOptions_SetReconnectWait(options, 1000), "the NATS client's reconnect wait")
            try self.check(self.api.natsOptions_SetTimeout(options, 2000), "the NATS client's connect timeout")
            let closure = Unmanaged.passUnretained(handlers).toOpaque()
            try self.check(self.api.natsOptions_SetDisconnectedCB(options, NATSHandlers.disconnected, closure), "the NATS client's handlers")
            try self.check(self.api.natsOptions_SetReconnectedCB(options, NATSHandlers.reconnected, closure), "the NATS client's handlers")
            try self.check(self.api.natsOptions_SetClosedCB(options, NATSHandlers.closed, closure), "the NATS client's handlers")
            try self.check(self.api.natsOptions_SetRetryOnFailedConnect(options, true, NATSHandlers.reconnected, closure), "the NATS client's retries")
        } catch {
            self.api.natsOptions_Destroy(options)
            throw error
        }
        return options
    }
}

/// What the NATS client's threads tell: the connection's changes, and each publish's answer.
/// Held (retained) by its owner for as long as the connection lives.
final class NATSHandlers: @unchecked Sendable {
    let library: NATSLibrary
    let connectionChanged: @Sendable (_ connected: Bool, _ closed: Bool) -> Void
    let acknowledged: @Sendable (_ seq: UInt64, _ error: String?) -> Void

    init(
        library: NATSLibrary,
        connectionChanged: @escaping @Sendable (_ connected: Bool, _ closed: Bool) -> Void,
        acknowledged: @escaping @Sendable (_ seq: UInt64, _ error: String?) -> Void
    ) {
        self.library = library
        self.connectionChanged = connectionChanged
        self.acknowledged = acknowledged
    }

    private static func handlers(_ closure: UnsafeMutableRawPointer?) -> NATSHandlers? {
        closure.map { Unmanaged<NATSHandlers>.fromOpaque($0).takeUnretainedValue() }
    }

    static let disconnected: natsConnectionHandler = { _, closure in handlers(closure)?.connectionChanged(false, false) }
    static let reconnected: natsConnectionHandler = { _, closure in handlers(closure)?.connectionChanged(true, false) }
    static let closed: natsConnectionHandler = { _, closure in handlers(closure)?.connectionChanged(false, true) }

    /// A publish's answer: the message's seq read from its header, then told.
    static let ack: jsPubAckHandler = { _, message, _, error, closure in
        guard let handlers = handlers(closure), let message else { return }
        let api = handlers.library.api
        var value: UnsafePointer<CChar>?
        guard api.natsMsgHeader_Get(message, FleetPublisher.seqHeader, &value) == NATS_OK, let value, let seq = UInt64(String(cString: value)) else { return }
        let text: String? = error.map { e in
            let pae = e.pointee
            if let t = pae.ErrText { return String(cString: t) }
            return api.natsStatus_GetText(pae.Err).map { String(cString: $0) } ?? "error \(pae.Err.rawValue)"
        }
        handlers.acknowledged(seq, text)
    }
}

/// Why the fleet cannot do what it was asked, said for the operator.
struct FleetError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
