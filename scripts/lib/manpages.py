#!/usr/bin/env python3
"""Writes the man pages wsbridged(8) and wsbridgectl(1): swift-argument-parser's generate-manual
makes the synopsis and options from the binaries' own help (nothing written twice), and this
script adds what help cannot say: FILES, SIGNALS, ENVIRONMENT, EXIT STATUS and SEE ALSO from
docs/man/*.sections, the release in the footer, and the date of the newest CHANGELOG.md entry (so
a rebuilt page is the same page).

    manpages.py --tool PATH/generate-manual --bin DIR --out DIR

scripts/install and scripts/package call it; it runs the binaries in --bin for their help and
version.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = [("wsbridged", "8"), ("wsbridgectl", "1")]


def newest_release():
    """(version, date) of CHANGELOG.md's newest entry: `## 0.1.0 (2026-11-24)`."""
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"## (\S+) \((\d{4}-\d{2}-\d{2})\)", line)
            if m:
                return m.group(1), m.group(2)
    sys.exit("manpages: CHANGELOG.md has no '## VERSION (YYYY-MM-DD)' entry")


def drop_help_subcommand(lines):
    """wsbridged has no subcommands, but the help dump lists ArgumentParser's implicit `help`:
    take out `.Ar subcommand` from the synopsis and the `.It Em help` item with its nested list."""
    out, skipping, depth = [], False, 0
    for line in lines:
        if skipping:
            if line.startswith(".Bl"):
                depth += 1
                continue
            if line.startswith(".El"):
                if depth == 0:
                    skipping = False  # this .El closes the options list: keep it
                else:
                    depth -= 1
                    continue
            else:
                continue
        if line == ".Ar subcommand":
            continue
        if line == ".It Em help":
            skipping, depth = True, 0
            continue
        out.append(line)
    return out


def finish(text, name, section, version):
    lines = text.rstrip("\n").split("\n")
    if name == "wsbridged":
        lines = drop_help_subcommand(lines)
    # The generic EXIT STATUS (.Ex -std) is replaced by the documented codes.
    cut = next((i for i, l in enumerate(lines) if l in ('.Sh "EXIT STATUS"', ".Sh EXIT STATUS")), len(lines))
    lines = lines[:cut]
    lines = [f".Os wsbridge {version}" if l == ".Os" else l for l in lines]
    # A blank line in a discussion is a paragraph break: mdoc's .Pp, not an empty input line.
    lines = [".Pp" if not l.strip() else l for l in lines]
    with open(os.path.join(ROOT, "docs", "man", f"{name}.{section}.sections"), encoding="utf-8") as f:
        extra = f.read().rstrip("\n").split("\n")
    return "\n".join(lines + extra) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="swift-argument-parser's generate-manual")
    ap.add_argument("--bin", required=True, help="directory holding wsbridged and wsbridgectl")
    ap.add_argument("--out", required=True, help="directory to write wsbridged.8 and wsbridgectl.1 into")
    args = ap.parse_args()
    release, date = newest_release()
    version = subprocess.run([os.path.join(args.bin, "wsbridged"), "--version"], check=True, capture_output=True, text=True).stdout.split()[0]
    if version != release:
        sys.exit(f"manpages: the binaries say {version}, CHANGELOG.md's newest entry {release}: add an entry for {version}")
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, section in PAGES:
            subprocess.run([args.tool, os.path.join(args.bin, name), "--section", section, "--date", date, "-o", tmp], check=True)
            with open(os.path.join(tmp, f"{name}.{section}"), encoding="utf-8") as f:
                page = finish(f.read(), name, section, version)
            with open(os.path.join(args.out, f"{name}.{section}"), "w", encoding="utf-8") as f:
                f.write(page)


if __name__ == "__main__":
    main()
