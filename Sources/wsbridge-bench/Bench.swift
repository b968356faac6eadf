import ArgumentParser

/// wsbridged's benchmarks. `suite` runs every scenario against its baselines in one run (see
/// docs/performance.md); the others time one mechanism alone.
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wsbridge-bench",
        abstract: "wsbridged's benchmarks, each side by side with its baselines in one run.",
        subcommands: [Suite.self, Cost.self, Latency.self, DropCost.self, DeflateCost.self, RawCopy.self, SpoolCost.self, OrderFile.self, DedupeCost.self],
        defaultSubcommand: Suite.self
    )
}
