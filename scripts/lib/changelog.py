#!/usr/bin/env python3
"""CHANGELOG.md in the forms a Debian package needs (scripts/lib/files.sh installs both):

    changelog.py --debian      the Debian changelog (native package: /usr/share/doc/wsbridge/changelog.gz)
    changelog.py --copyright   the machine-readable copyright file (LICENSE is Apache-2.0)
    changelog.py --version     the newest entry's version

CHANGELOG.md's entries are `## VERSION (YYYY-MM-DD)` headings followed by text and `- ` items;
each becomes one Debian entry, its items the `  * ` lines. The maintainer is MAINTAINER, or
"wsbridge developers <wsbridge@example.org>".
"""
import email.utils
import datetime
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAINTAINER = os.environ.get("MAINTAINER", "wsbridge developers <wsbridge@example.org>")


def entries():
    """[(version, date, [item text])] from CHANGELOG.md, newest first."""
    out = []
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"## (\S+) \((\d{4}-\d{2}-\d{2})\)$", line)
            if m:
                out.append((m.group(1), m.group(2), []))
            elif out and line.startswith("- "):
                out[-1][2].append(line[2:].strip())
            elif out and line.startswith("  ") and out[-1][2]:
                out[-1][2][-1] += " " + line.strip()
            elif out and line.strip() and not line.startswith("#"):
                out[-1][2].append(line.strip())
    if not out:
        sys.exit("changelog: CHANGELOG.md has no '## VERSION (YYYY-MM-DD)' entry")
    return out


def debian():
    for version, date, items in entries():
        print(f"wsbridge ({version}) unstable; urgency=medium\n")
        for item in items:
            print(textwrap.fill(item, width=78, initial_indent="  * ", subsequent_indent="    "))
        day = datetime.datetime.strptime(date, "%Y-%m-%d").replace(hour=12, tzinfo=datetime.timezone.utc)
        print(f"\n -- {MAINTAINER}  {email.utils.format_datetime(day)}\n")


def copyright():
    year = entries()[-1][1][:4]
    print(
        f"""Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: wsbridge

Files: *
Copyright: {year} wsbridge developers
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not
 use this file except in compliance with the License. You may obtain a copy of
 the License at http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 License for the specific language governing permissions and limitations under
 the License.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0 can be
 found in "/usr/share/common-licenses/Apache-2.0"."""
    )


if __name__ == "__main__":
    {"--debian": debian, "--copyright": copyright, "--version": lambda: print(entries()[0][0])}.get(
        sys.argv[1] if len(sys.argv) > 1 else "", lambda: sys.exit(__doc__)
    )()
