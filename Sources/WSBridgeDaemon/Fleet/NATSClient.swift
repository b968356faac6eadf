import CNATS
import Foundation
import NIOCore
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

/// A connection made (or still being made: `now` false) and its JetStream context.
struct NATSConnected: @unchecked Sendable {
    let connection: OpaquePointer
    let jetStream: OpaquePointer
    let now: Bool
}

extension NATSLibrary {
    /// Connects to `fleet`'s servers (blocks: called on the thread pool). The client goes on
    /// trying in the background when none answers now; `maxPending`: publishes waiting for
    /// JetStream's acknowledgement, at most.
    func connect(_ fleet: Configuration.Fleet, name: String, handlers: NATSHandlers, maxPending: Int64) throws -> NATSConnected {
        let options = try self.options(fleet, name: name, handlers: handlers)
        defer { self.api.natsOptions_Destroy(options) }
        var connection: OpaquePointer?
        let status = self.api.natsConnection_Connect(&connection, options)
        guard status == NATS_OK || status == NATS_NOT_YET_CONNECTED, let connection else {
            throw FleetError("connecting to \(fleet.servers.joined(separator: ", ")): \(self.text(status))")
        }
        var jsOptions = jsOptions()
        _ = self.api.jsOptions_Init(&jsOptions)
        jsOptions.PublishAsync.MaxPending = maxPending
        jsOptions.PublishAsync.AckHandler = NATSHandlers.ack
        jsOptions.PublishAsync.AckHandlerClosure = Unmanaged.passUnretained(handlers).toOpaque()
        var jetStream: OpaquePointer?
        let made = self.api.natsConnection_JetStream(&jetStream, connection, &jsOptions)
        guard made == NATS_OK, let jetStream else {
            self.api.natsConnection_Destroy(connection)
            throw FleetError("the JetStream context: \(self.text(made))")
        }
        return NATSConnected(connection: connection, jetStream: jetStream, now: status == NATS_OK)
    }

    /// Closes and frees a connection (blocks: called on the thread pool).
    func close(_ connection: OpaquePointer, jetStream: OpaquePointer?) {
        if let jetStream { self.api.jsCtx_Destroy(jetStream) }
        self.api.natsConnection_Close(connection)
        self.api.natsConnection_Destroy(connection)
    }

    /// The URL of the server `connection` is connected to now, if it is.
    func connectedURL(_ connection: OpaquePointer) -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        guard self.api.natsConnection_GetConnectedUrl(connection, &buffer, buffer.count) == NATS_OK, buffer[0] != 0 else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A message's data, as bytes.
    func data(of message: OpaquePointer) -> ByteBuffer {
        let length = Int(self.api.natsMsg_GetDataLength(message))
        guard length > 0, let data = self.api.natsMsg_GetData(message) else { return ByteBuffer() }
        return ByteBuffer(bytes: UnsafeRawBufferPointer(start: data, count: length))
    }

    /// A header's value, if the message has it.
    func header(_ name: String, of message: OpaquePointer) -> String? {
        var value: UnsafePointer<CChar>?
        guard self.api.natsMsgHeader_Get(message, name, &value) == NATS_OK, let value else { return nil }
        return String(cString: value)
    }
}

/// A subscription's callback: each message handed to `body`, which owns it (and destroys it).
/// Held (retained) by its owner for as long as the subscription lives.
final class NATSMessages: @unchecked Sendable {
    let body: @Sendable (OpaquePointer) -> Void

    init(_ body: @escaping @Sendable (OpaquePointer) -> Void) {
        self.body = body
    }

    var closure: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    static let callback: natsMsgHandler = { _, _, message, closure in
        guard let closure, let message else { return }
        Unmanaged<NATSMessages>.fromOpaque(closure).takeUnretainedValue().body(message)
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

    /// A publish's answer: the message's seq read from its header, then told. The handler owns
    /// the message (the client hands it over and forgets it): destroyed here.
    static let ack: jsPubAckHandler = { _, message, _, error, closure in
        guard let message else { return }
        guard let handlers = handlers(closure) else { return }
        let api = handlers.library.api
        defer { api.natsMsg_Destroy(message) }
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

extension NATSLibrary {
    /// `fleet.batch`: what a message of the stream says of its numbers (FleetBatch).
    func numbers(of message: OpaquePointer) -> FleetBatch.Numbers {
        let first = self.header(FleetPublisher.numberHeader, of: message).flatMap { UInt64($0) }
        let count = self.header(FleetPublisher.batchHeader, of: message).flatMap { UInt64($0) } ?? 1
        return FleetBatch.Numbers(first: first, count: max(count, 1))
    }

    /// The last number of the last numbered message at or before stream seq `seq`, looking back
    /// at most `FleetBatch.lookBack` messages (`first`: the message at `seq`, read already); nil:
    /// none there (blocks: on the thread pool).
    func lastNumber(_ jetStream: OpaquePointer, _ stream: String, from seq: UInt64, first: OpaquePointer? = nil) throws -> UInt64? {
        var at = seq
        var given = first
        while at > 0, seq - at < UInt64(FleetBatch.lookBack) {
            var message = given
            given = nil
            var owned = false
            if message == nil {
                var code = jsErrCode(rawValue: 0)
                let read = self.api.js_GetMsg(&message, jetStream, stream, at, nil, &code)
                owned = true
                if read != NATS_OK {
                    if let message { self.api.natsMsg_Destroy(message) }
                    // Deleted, or before the stream's first: none there.
                    guard read == NATS_NOT_FOUND || code == jsErrCode(rawValue: 10037) else {
                        throw FleetError("reading the stream \(stream)'s message at seq \(at): \(self.text(read))")
                    }
                    message = nil
                }
            }
            if let message {
                let numbers = self.numbers(of: message)
                if owned { self.api.natsMsg_Destroy(message) }
                if numbers.first != nil { return numbers.last(at: at) }
            }
            at -= 1
        }
        return nil
    }
}
