# shellcheck shell=bash
# How every script builds release binaries:
# - the Swift runtime and Foundation linked statically (--static-swift-stdlib): the binaries run
#   on a host without a Swift toolchain, only the code they touch is resident instead of whole
#   shared libraries, and calls into the runtime (retain, release) skip the PLT;
# - no dynamic symbol table for our own code (--no-export-dynamic; the static runtime's link
#   arguments ask for one): 23,000 symbols the loader would page in for nothing. Crash
#   backtraces still name every frame: the backtracer reads the full symbol table.
# Idle RSS 19.5 MiB instead of 28 (docs/performance.md). Sourced:
#   swift build "${RELEASE[@]}" --product wsbridged
RELEASE=(-c release --static-swift-stdlib -Xlinker --no-export-dynamic)
