# shellcheck shell=bash
# The one list of the files wsbridge installs. scripts/install, scripts/uninstall and
# scripts/package all read it, so the package and a source install put the same files in the
# same places (a test compares them).
#
#   source scripts/lib/files.sh
#   wsbridge_build              # sets BIN and GENERATE_MANUAL (building what is not given)
#   wsbridge_generate BIN GEN   # writes into GEN what the list installs but git does not hold:
#                               # man pages, completions, the units with this PREFIX's paths,
#                               # the copyright file and the changelog
#   wsbridge_files BIN GEN      # prints the list: one "MODE SOURCE DESTINATION" line per file,
#                               # MODE "conf" for the configuration (never overwritten)
#
# Reads PREFIX, SYSCONFDIR and UNITDIR. Run from the repository's root.

# Sets BIN (the binaries to install: WSBRIDGE_BIN_DIR, or built now in CONFIGURATION, release by
# default, with scripts/lib/release.sh's flags) and GENERATE_MANUAL (built now unless given).
wsbridge_build() {
    local configuration="${CONFIGURATION:-release}" flags
    if [[ -n "${WSBRIDGE_BIN_DIR:-}" ]]; then
        BIN="$WSBRIDGE_BIN_DIR"
    else
        scripts/setup
        source scripts/lib/release.sh
        flags=(-c "$configuration")
        [[ $configuration == release ]] && flags=("${RELEASE[@]}")
        swift build "${flags[@]}" --product wsbridged
        swift build "${flags[@]}" --product wsbridgectl
        BIN="$(swift build "${flags[@]}" --show-bin-path)"
    fi
    if [[ -z "${GENERATE_MANUAL:-}" ]]; then
        swift build --product generate-manual >/dev/null
        GENERATE_MANUAL="$(swift build --show-bin-path)/generate-manual"
    fi
    export GENERATE_MANUAL
}

wsbridge_units=(wsbridged.service wsbridged.socket wsbridged@.service wsbridged@.socket)
wsbridge_docs=(README.md CHANGELOG.md docs/protocol.md docs/metrics.md docs/design.md docs/sessions.md docs/spool.md docs/journal.md docs/protocols.md docs/clients.md docs/packaging.md docs/limits.md docs/fleet.md docs/websocket.md)

wsbridge_files() {
    local bin="$1" gen="$2" unit doc
    echo "755 $bin/wsbridged $PREFIX/bin/wsbridged"
    echo "755 $bin/wsbridgectl $PREFIX/bin/wsbridgectl"
    for unit in "${wsbridge_units[@]}"; do
        echo "644 $gen/units/$unit $UNITDIR/$unit"
    done
    echo "conf etc/wsbridged.toml $SYSCONFDIR/wsbridge/wsbridged.toml"
    echo "644 $gen/man/wsbridged.8.gz $PREFIX/share/man/man8/wsbridged.8.gz"
    echo "644 $gen/man/wsbridgectl.1.gz $PREFIX/share/man/man1/wsbridgectl.1.gz"
    echo "644 $gen/completions/wsbridgectl.bash $PREFIX/share/bash-completion/completions/wsbridgectl"
    # zsh looks in vendor-completions for the system's packages, in site-functions under /usr/local.
    local zsh=site-functions
    [[ $PREFIX == /usr ]] && zsh=vendor-completions
    echo "644 $gen/completions/_wsbridgectl $PREFIX/share/zsh/$zsh/_wsbridgectl"
    echo "644 $gen/completions/wsbridgectl.fish $PREFIX/share/fish/vendor_completions.d/wsbridgectl.fish"
    for doc in "${wsbridge_docs[@]}"; do
        echo "644 $doc $PREFIX/share/doc/wsbridge/$(basename "$doc")"
    done
    echo "644 etc/wsbridge-alerts.yml $PREFIX/share/doc/wsbridge/examples/wsbridge-alerts.yml"
    echo "644 $gen/copyright $PREFIX/share/doc/wsbridge/copyright"
    echo "644 $gen/changelog.gz $PREFIX/share/doc/wsbridge/changelog.gz"
}

wsbridge_generate() {
    local bin="$1" gen="$2" unit
    rm -rf "$gen"
    mkdir -p "$gen/units" "$gen/man" "$gen/completions"
    for unit in "${wsbridge_units[@]}"; do
        sed -e "s|/usr/local/bin/wsbridged|$PREFIX/bin/wsbridged|g" \
            -e "s|/etc/wsbridge/|$SYSCONFDIR/wsbridge/|g" \
            -e "s|file:/usr/local/share/doc|file:$PREFIX/share/doc|g" "systemd/$unit" >"$gen/units/$unit"
    done
    python3 scripts/lib/manpages.py --tool "${GENERATE_MANUAL:?GENERATE_MANUAL: the path of generate-manual}" --bin "$bin" --out "$gen/man"
    gzip -9n "$gen/man/wsbridged.8" "$gen/man/wsbridgectl.1"
    # bash-completion sources the file: no #! line.
    "$bin/wsbridgectl" --generate-completion-script bash | sed '1{/^#!/d}' >"$gen/completions/wsbridgectl.bash"
    "$bin/wsbridgectl" --generate-completion-script zsh >"$gen/completions/_wsbridgectl"
    "$bin/wsbridgectl" --generate-completion-script fish >"$gen/completions/wsbridgectl.fish"
    python3 scripts/lib/changelog.py --copyright >"$gen/copyright"
    python3 scripts/lib/changelog.py --debian | gzip -9n >"$gen/changelog.gz"
}
