import Foundation
import Testing

/// Every committed fuzz input (the seeds, and the inputs of crashes found and fixed) replays
/// through the fuzz targets in a plain build, so a fixed crash stays fixed (docs/fuzzing.md).
@Suite struct FuzzCorpusTests {
    static let corpus = "\(Paths.root)/Tests/fuzz/corpus"

    static var targets: [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: corpus).sorted()) ?? []
    }

    @Test func everyTargetHasSeedsAndEveryInputPassesItsProperties() throws {
        let listed = try spawnAndWait("\(Paths.root)/scripts/fuzz", ["--list"]).stdout.split(separator: "\n").map(String.init)
        #expect(listed == Self.targets, "scripts/fuzz --list and Tests/fuzz/corpus disagree")
        for target in Self.targets {
            let inputs = try FileManager.default.contentsOfDirectory(atPath: "\(Self.corpus)/\(target)").sorted().map { "\(Self.corpus)/\(target)/\($0)" }
            #expect(!inputs.isEmpty, "no seeds for \(target)")
            var environment = ProcessInfo.processInfo.environment
            environment["WSBRIDGE_FUZZ_TARGET"] = target
            let r = try spawnAndWait("\(Paths.bin)/wsbridge-fuzz", inputs, environment: environment)
            #expect(r.status == 0, "\(target): \(r.stdout)\(r.stderr)")
        }
    }
}
