"""Counts the tests in a step's log for scripts/test's summary, or shows what a failed step said.

    count-tests.py LOG              prints "PASSED FAILED SKIPPED"
    count-tests.py --explain LOG    prints the lines that tell why the step failed
    count-tests.py --failures LOG   prints each failed test's name and what it recorded

Reads swift test's output (Swift Testing's per-test lines and XCTest's "Executed N tests"), the
plain "N passed, M failed" line that scripts/systemd-test ends with, and the fuzzer's per-target
lines. A log with none of them counts nothing (a build, the lint).
"""

import os
import re
import sys

# Swift Testing: "✔ Test name() passed after 0.1 seconds.", "✘ Test name() failed after ...",
# "➜ Test name() skipped: ..." (also with parameters: "with 3 test cases passed").
TESTING = re.compile(r'^\S+ Test (?!run with)("[^"]*"|[^\s(]+\([^)]*\))(?: with \d+ test cases?)? (passed|failed|skipped)\b')
XCTEST = re.compile(r"^\s*Executed (\d+) tests?, with (\d+) failures?")
PLAIN = re.compile(r"^(?:\S+: )?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$")
FUZZ_RAN = re.compile(r"^fuzz: (\S+) for ")
FUZZ_DONE = re.compile(r"^Done \d+ runs")


def count(lines):
    passed = failed = skipped = 0
    xc_total = xc_failed = 0
    plain = None
    fuzz_targets = fuzz_done = 0
    for line in lines:
        m = TESTING.match(line)
        if m:
            kind = m.group(2)
            if kind == "passed":
                passed += 1
            elif kind == "failed":
                failed += 1
            else:
                skipped += 1
            continue
        m = XCTEST.match(line)
        if m:
            # XCTest prints a line per suite and one for all: the last is the total.
            xc_total, xc_failed = int(m.group(1)), int(m.group(2))
            continue
        m = PLAIN.match(line.strip())
        if m:
            plain = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
            continue
        if FUZZ_RAN.match(line):
            fuzz_targets += 1
        elif FUZZ_DONE.match(line):
            fuzz_done += 1
    if plain is not None:
        return plain
    if fuzz_targets:
        return fuzz_done, fuzz_targets - fuzz_done, 0
    return passed + xc_total - xc_failed, failed + xc_failed, skipped


TELLS = re.compile(
    r"(✘|error:|Error:|FAILED|FAIL |Fatal error|fatal error|Expectation failed|recorded an issue|"
    r"==\d+==|SUMMARY:|Test unit written|failed|exited \d+)"
)
NOISE = re.compile(r"ld\.gold: warning: Cannot export local symbol|^\[\d+/\d+\] Compiling")


def explain(lines):
    told = [l for l in lines if TELLS.search(l) and not NOISE.search(l)]
    shown = told[-120:] if told else []
    tail = [l for l in lines if not NOISE.search(l)][-40:]
    for l in shown:
        print("    " + l)
    print("    --- the log's last lines ---")
    for l in tail:
        print("    " + l)


ISSUE = re.compile(r'^\S+ Test ("[^"]*"|[^\s(]+\([^)]*\)) recorded an issue(?: with \d+ arguments?[^:]*)? at (.*)$')
FAILED_TEST = re.compile(r'^\S+ Test ("[^"]*"|[^\s(]+\([^)]*\))(?: with \d+ test cases?)? failed\b')
XC_FAILED = re.compile(r"^Test Case '-?\[?([^']+?)\]?' failed")
XC_ISSUE = re.compile(r"^(\S+\.swift:\d+: error: .*)$")


TYPE = re.compile(r"^(\s*)(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:final|public|private|fileprivate)\s+)*(?:struct|class|enum|extension|actor)\s+(\w+)")
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Tests")


def suite_of(name):
    """The suite (the type) a failed test function is declared in, found in Tests/, for the
    command that runs it again; None for a display name or a name found in no file or twice."""
    if name.startswith('"'):
        return None
    function = re.compile(r"^(\s*)(?:@\w+.*\s)?func " + re.escape(name.split("(")[0]) + r"\(")
    found = set()
    for root, _, files in os.walk(TESTS):
        for file in files:
            if not file.endswith(".swift"):
                continue
            with open(os.path.join(root, file), encoding="utf-8", errors="replace") as f:
                source = f.read().split("\n")
            for i, line in enumerate(source):
                m = function.match(line)
                if not m:
                    continue
                indent = len(m.group(1))
                for above in reversed(source[:i]):
                    t = TYPE.match(above)
                    if t and len(t.group(1)) < indent:
                        found.add(t.group(2))
                        break
    return found.pop() if len(found) == 1 else None


def failures(lines):
    """Each failed test once, in the order they failed, with the issues it recorded (each
    issue's first lines: its place, its expectation and the comment printed with it)."""
    issues = {}
    order = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = ISSUE.match(line)
        if m:
            name = m.group(1)
            text = [m.group(2)]
            j = i + 1
            # Its comments follow it on lines of their own ("↳ ..."); other tests' output may
            # come between, and is not its.
            while j < len(lines) and len(text) < 8 and lines[j].lstrip().startswith("\u21b3"):
                text.append(lines[j].strip())
                j += 1
            if name not in issues:
                issues[name] = []
                order.append(name)
            issues[name].append(text)
            i = j
            continue
        m = FAILED_TEST.match(line) or XC_FAILED.match(line)
        if m and m.group(1) not in issues:
            issues[m.group(1)] = []
            order.append(m.group(1))
        m = XC_ISSUE.match(line)
        if m:
            if "xctest" not in issues:
                issues["xctest"] = []
                order.append("xctest")
            issues["xctest"].append([m.group(1)])
        i += 1
    for name in order:
        print(name)
        suite = suite_of(name)
        if suite:
            print("    again: scripts/test --filter %s.%s" % (suite, name.split("(")[0]))
        for text in issues[name][:5]:
            print("    " + text[0])
            for more in text[1:]:
                print("      " + more)
        if len(issues[name]) > 5:
            print("    (%d more issues in the log)" % (len(issues[name]) - 5))


def main():
    args = sys.argv[1:]
    mode = "count"
    if args and args[0] in ("--explain", "--failures"):
        mode = args[0][2:]
        args = args[1:]
    with open(args[0], encoding="utf-8", errors="replace") as f:
        lines = [l.rstrip("\n") for l in f]
    if mode == "explain":
        # A test run's failures say it all; the log's tail is other tests' output.
        if any(FAILED_TEST.match(l) or ISSUE.match(l) for l in lines):
            failures(lines)
        else:
            explain(lines)
    elif mode == "failures":
        failures(lines)
    else:
        print("%d %d %d" % count(lines))


main()
