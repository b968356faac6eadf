#if !FUZZING && DEBUG
    #if canImport(Glibc)
        import Glibc
    #endif

    /// Without libFuzzer (a plain build): runs each file named on the command line through the
    /// target, as libFuzzer would, so a corpus or a crash's input replays in the tests.
    @main
    struct Replay {
        static func main() {
            for path in CommandLine.arguments.dropFirst() {
                guard let file = fopen(path, "rb") else {
                    print("wsbridge-fuzz: cannot open \(path)")
                    exit(66)
                }
                var bytes: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = fread(&chunk, 1, chunk.count, file)
                    if n == 0 { break }
                    bytes += chunk[0..<n]
                }
                fclose(file)
                _ = bytes.withUnsafeBufferPointer { fuzzOne($0.baseAddress ?? UnsafePointer(bitPattern: 1)!, $0.count) }
            }
        }
    }
#endif

#if FUZZING
    #if canImport(Glibc)
        import Glibc
    #endif

    /// libFuzzer's driver (libclang_rt.fuzzer): its own `main` is not linked, because SwiftPM
    /// names this program's entry point `main`; this entry hands the command line to it.
    @_silgen_name("LLVMFuzzerRunDriver")
    func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
        _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
    ) -> CInt

    @main
    struct Fuzz {
        static func main() {
            var argc = CommandLine.argc
            var argv = CommandLine.unsafeArgv
            exit(runFuzzerDriver(&argc, &argv) { data, size in fuzzOne(data, size) })
        }
    }
#endif

#if !FUZZING && !DEBUG
    /// A release build (`swift build -c release` builds every product): the targets need the
    /// daemon's internals, which only a debug build exposes.
    @main
    struct Replay {
        static func main() {
            print(
                "wsbridge-fuzz: a release build has no fuzz targets; scripts/fuzz builds them (debug, with libFuzzer), and `swift build` (debug) replays a corpus"
            )
        }
    }
#endif
