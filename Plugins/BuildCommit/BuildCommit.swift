import Foundation
import PackagePlugin

/// Records the git commit a build comes from, for `--version`, `hello`, status, the User-Agent and
/// `wsbridge_build_info`: before every build, a shell writes `BuildCommit.swift` into the plugin's
/// work directory, and only when the commit changed (an unchanged file compiles nothing again).
/// Outside a git checkout (a source tarball) the commit is nil. A build from a tree with
/// uncommitted changes to tracked files says so: "<commit>-dirty".
@main
struct BuildCommit: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "BuildCommit.swift")
        let script = #"""
            dir="$1"; out="$2"; commit=""
            if [ -e "$dir/.git" ] && command -v git >/dev/null 2>&1; then
                git() { GIT_CEILING_DIRECTORIES="$(dirname "$dir")" command git -c safe.directory="$dir" -C "$dir" "$@"; }
                commit="$(git rev-parse --short=12 HEAD 2>/dev/null)" || commit=""
                if [ -n "$commit" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
                    commit="$commit-dirty"
                fi
            fi
            value=nil; [ -n "$commit" ] && value="\"$commit\""
            text="// Written by the BuildCommit plugin before every build; not in git.
            extension WSBridgeVersion {
                /// The git commit this binary was built from (\"-dirty\": with uncommitted changes), nil outside a checkout.
                public static let commit: String? = $value
            }"
            if [ ! -f "$out" ] || [ "$(cat "$out")" != "$text" ]; then printf '%s\n' "$text" >"$out.tmp" && mv "$out.tmp" "$out"; fi
            """#
        return [
            .prebuildCommand(
                displayName: "Recording the git commit of \(target.name)",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: ["-c", script, "sh", context.package.directoryURL.path, output.path],
                outputFilesDirectory: context.pluginWorkDirectoryURL
            )
        ]
    }
}
