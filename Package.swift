// swift-tools-version: 6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

// The message path's targets skip the runtime exclusivity checks in release builds: every
// mutation of a class's stored property otherwise costs a swift_beginAccess (a thread-local
// access set), a fifth of the daemon's time per message under load (perf, docs/performance.md).
// Debug builds, which run the tests, keep the checks; Swift 6 strict concurrency keeps the data
// race checks at compile time either way.
let hotPath: [SwiftSetting] = strict + [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "wsbridge",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "wsbridged", targets: ["wsbridged"]),
        .executable(name: "wsbridgectl", targets: ["wsbridgectl"]),
        .executable(name: "wsbridge-testserver", targets: ["wsbridge-testserver"]),
    ],
    // Pinned here, not in Package.resolved (kept out of git: it would record the commit ids of the
    // package mirrors this was built with, which the public repositories do not have). Built and
    // tested with exactly these versions (README, "Dependencies"). `.upToNextMinor` where a minor
    // release changed behaviour we rely on: NIO's channel and WebSocket handlers and NIOSSL's
    // verification callbacks (the connector and its error texts), NIO extras' SOCKS client (the
    // fuzzed handshake), ArgumentParser's help layout (the golden help texts and man pages),
    // TOMLKit's error positions (config errors name FILE:LINE), the service lifecycle's signal
    // handling, compress-nio's window handling (permessage-deflate), Prometheus' text output and
    // HdrHistogram's API (still 0.x). `from:` for APIs that have stayed put across minors.
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", .upToNextMinor(from: "2.101.3")),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", .upToNextMinor(from: "2.37.6")),
        .package(url: "https://github.com/apple/swift-nio-extras.git", .upToNextMinor(from: "1.35.2")),
        .package(url: "https://github.com/apple/swift-argument-parser.git", .upToNextMinor(from: "1.8.2")),
        .package(url: "https://github.com/LebJe/TOMLKit.git", .upToNextMinor(from: "0.6.0")),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", .upToNextMinor(from: "2.13.0")),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", .upToNextMinor(from: "1.5.0")),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", .upToNextMinor(from: "0.2.0")),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", .upToNextMinor(from: "2.4.1")),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/swift-extras/swift-extras-base64.git", from: "1.2.0"),
    ],
    targets: [
        // libsystemd (sd_notify, sd_listen_fds, sd_journal_sendv) through pkg-config.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // Linux constants and macros Glibc does not export (rtnetlink, SO_PEERCRED, memmem), the
        // spool's CRC-32C, and the CLI's Unix-socket connect.
        .target(name: "CWSBridgeLinux"),
        // The NATS C client for `[fleet]`, loaded with dlopen when configured (its header only at build).
        .target(name: "CNATS"),
        .target(name: "CWSBridgeBytes"),
        // The versioned NDJSON protocol shared by the daemon and the CLI.
        .target(
            name: "WSBridgeProtocol",
            dependencies: ["CWSBridgeBytes", .product(name: "ExtrasBase64", package: "swift-extras-base64")],
            swiftSettings: hotPath,
            plugins: ["BuildCommit"]
        ),
        // Writes WSBridgeVersion.commit (the git commit of the build) before every build.
        .plugin(name: "BuildCommit", capability: .buildTool()),
        // Pure logic: configuration, state machines, backoff, heartbeat. No I/O.
        .target(
            name: "WSBridgeCore",
            dependencies: [
                "WSBridgeProtocol",
                "CWSBridgeBytes",
                .product(name: "TOMLKit", package: "TOMLKit"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: hotPath
        ),
        // The I/O: NIO channels, upstream link driver, reachability, logging, systemd glue.
        .target(
            name: "WSBridgeDaemon",
            dependencies: [
                "WSBridgeCore",
                "WSBridgeProtocol",
                "CWSBridgeBytes",
                "CSystemd",
                "CWSBridgeLinux",
                "CNATS",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOSOCKS", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: hotPath
        ),
        .executableTarget(
            name: "wsbridged",
            dependencies: [
                "WSBridgeDaemon",
                "WSBridgeProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "wsbridgectl",
            dependencies: [
                "CWSBridgeLinux",
                "WSBridgeProtocol",
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        // A loopback-only WebSocket server with fault modes, for the demo, tests and benchmarks.
        .executableTarget(
            name: "wsbridge-testserver",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        // Benchmark subscriber in its own process: counts lines, checks seq, slow and stalled modes.
        .executableTarget(
            name: "wsbridge-reader",
            dependencies: [
                "WSBridgeCore",
                "WSBridgeDaemon",
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        // The benchmarks: the suite (every scenario against its baselines), the raw-copy baseline,
        // and micro-benchmarks of the drop path and permessage-deflate.
        .executableTarget(
            name: "wsbridge-bench",
            dependencies: [
                "WSBridgeCore",
                "WSBridgeDaemon",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        // The fuzz targets (scripts/fuzz): libFuzzer's entry when built with -sanitize=fuzzer and
        // -DFUZZING, else a program that replays input files through the same targets.
        .executableTarget(
            name: "wsbridge-fuzz",
            dependencies: [
                "WSBridgeDaemon",
                "WSBridgeProtocol",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "WSBridgeProtocolTests",
            dependencies: ["WSBridgeProtocol"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "WSBridgeCoreTests",
            dependencies: ["WSBridgeCore"],
            swiftSettings: strict
        ),
        // Fast unit tests of the daemon's parts: EmbeddedChannel handlers and pure structs. No
        // processes, sockets, namespaces or systemd tools (those are WSBridgeIntegrationTests).
        .testTarget(
            name: "WSBridgeDaemonTests",
            dependencies: [
                "CWSBridgeLinux",
                "WSBridgeCore",
                "WSBridgeDaemon",
                "WSBridgeProtocol",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "WSBridgeIntegrationTests",
            dependencies: [
                "CWSBridgeLinux",
                "WSBridgeCore",
                "WSBridgeDaemon",
                "WSBridgeProtocol",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            exclude: ["Golden"],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
