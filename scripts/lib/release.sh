# shellcheck shell=bash
# How every script builds release binaries:
# - the Swift runtime and Foundation linked statically (--static-swift-stdlib): the binaries run
#   on a host without a Swift toolchain, only the code they touch is resident instead of whole
#   shared libraries, and calls into the runtime (retain, release) skip the PLT;
# - no dynamic symbol table for our own code (--no-export-dynamic; the static runtime's link
#   arguments ask for one): 23,000 symbols the loader would page in for nothing. Crash
#   backtraces still name every frame: the backtracer reads the full symbol table.
# - every function in its own section, and the ones wsbridged runs laid side by side by the
#   linker (hot-text.order, written by `wsbridge-bench order-file` from a callgrind profile of
#   the daemon's life): the kernel maps text in 64 KiB blocks around each page touched, so code
#   run at start-up and after, scattered through 15 MiB, made most of the text resident.
#   Functions the file does not name are laid out as before; a stale file costs RSS, not
#   correctness. After changing these flags, remove .build/*/release: the compiler keeps object
#   code whose IR did not change, whatever the new flags say.
# - no runtime exclusivity checks in any module (-enforce-exclusivity=unchecked): Package.swift
#   turns them off for our message path's targets, and this for SwiftNIO's too, whose ByteBuffer
#   writes otherwise cost a swift_beginAccess each (a thread-local access set): ~1,400
#   instructions of a local send's ~11,600. Debug builds, which run the tests, keep the checks
#   everywhere; strict concurrency checks data races at compile time either way.
# Idle RSS 17.2-17.5 MiB instead of 28 (docs/performance.md). Sourced:
#   swift build "${RELEASE[@]}" --product wsbridged
RELEASE=(
    -c release --static-swift-stdlib -Xlinker --no-export-dynamic -Xswiftc -enforce-exclusivity=unchecked
    -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections -Xcxx -ffunction-sections
    -Xlinker "--section-ordering-file=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/hot-text.order"
)
