import ArgumentParser
import WSBridgeProtocol

struct Metrics: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the daemon's metrics in the Prometheus text format.",
        discussion: "The same text that the optional HTTP endpoint ([metrics] listen) serves at /metrics; docs/metrics.md describes each metric."
    )

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let result = try self.global.run(.metrics)
        if self.global.json {
            Output.line(result.serialized)
            return
        }
        Output.write(1, try MetricsResult(json: result).text)
    }
}
