#!/usr/bin/env python3
"""hack/critest-report.py — the skip list and the JUnit report of hack/critest.sh.

Usage:
  critest-report.py skips  SKIPS_FILE RUNTIME
      print the regular expressions of the `skip` entries for RUNTIME (2.1, 1.6 or 2.3), one a
      line: hack/critest.sh passes each as --ginkgo.skip.
  critest-report.py report SKIPS_FILE RUNTIME JUNIT_XML SUMMARY_TXT
      count passed / failed / skipped specs in critest's JUnit report (--ginkgo.junit-report),
      match every failure against the `xfail` and `flaky` entries and every skipped spec
      against the `skip` and `selfskip` entries, write every spec with its status (and the
      reason from the list) to SUMMARY_TXT, print a short report, and exit 1 if a spec failed
      that is neither an expected failure nor a known flake (or the report is missing or
      empty), else 0. The last line printed is `RESULT <passed> <failed> <skipped>
      <tolerated-failures> <unexpected-failures>`, which hack/critest.sh consumes.

The list's format is documented at the top of hack/critest-skips.txt.
"""
import re
import sys
import xml.etree.ElementTree as ET

KINDS = ("skip", "selfskip", "xfail", "flaky")
FAILED = {"failed", "panicked", "interrupted", "timedout", "aborted"}


def load(path, runtime):
    entries = []
    with open(path, encoding="utf-8") as f:
        for no, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            body, sep, reason = line.partition(" # ")
            if not sep or not reason.strip():
                sys.exit(f"{path}:{no}: every entry needs a reason after ' # '")
            parts = body.split(None, 2)
            if len(parts) != 3 or parts[0] not in KINDS:
                sys.exit(f"{path}:{no}: expected 'KIND RUNTIMES REGEX  # reason' (KIND: {', '.join(KINDS)})")
            kind, runtimes, regex = parts[0], parts[1].split(","), parts[2].strip()
            if not set(runtimes) <= {"all", "2.1", "1.6", "2.3"}:
                sys.exit(f"{path}:{no}: RUNTIMES must be all, 2.1, 1.6, 2.3 (comma-separated)")
            try:
                pattern = re.compile(regex)
            except re.error as e:
                sys.exit(f"{path}:{no}: bad regular expression {regex!r}: {e}")
            if "all" in runtimes or runtime in runtimes:
                entries.append({"kind": kind, "regex": regex, "re": pattern, "reason": reason.strip(),
                                "line": no, "hits": 0})
    return entries


def match(entries, kinds, text):
    for e in entries:
        if e["kind"] in kinds and e["re"].search(text):
            e["hits"] += 1
            return e
    return None


def report(skips_file, runtime, junit, summary):
    entries = load(skips_file, runtime)
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"  no usable JUnit report {junit}: {e}")
        print("RESULT 0 0 0 0 1")
        return 1
    passed, failed, skipped, xfail, unexpected, unlisted, suite_failures = [], [], [], [], [], [], []
    lines = []
    for tc in root.iter("testcase"):
        name, status = tc.get("name", ""), tc.get("status", "")
        if not name.startswith("[It] "):
            # BeforeSuite/AfterSuite and the like: only their failures matter.
            if status in FAILED:
                suite_failures.append(name)
                lines.append(f"FAILED      {name}")
            continue
        text = name[len("[It] "):]
        if status == "passed":
            passed.append(text)
            e = match(entries, ("xfail", "flaky"), text)
            note = f"   (listed as expected failure, line {e['line']}: it passed)" if e and e["kind"] == "xfail" else ""
            lines.append(f"passed      {text}{note}")
        elif status in FAILED:
            failed.append(text)
            e = match(entries, ("xfail", "flaky"), text)
            if e:
                xfail.append((text, e))
                lines.append(f"{e['kind']:<11} {text}   # {e['reason']}")
            else:
                unexpected.append(text)
                lines.append(f"FAILED      {text}")
        else:  # skipped, pending
            skipped.append(text)
            e = match(entries, ("skip", "selfskip"), text)
            if e:
                lines.append(f"skipped     {text}   # {e['reason']}")
            else:
                unlisted.append(text)
                lines.append(f"skipped     {text}   # NOT LISTED in {skips_file}")
    total = len(passed) + len(failed) + len(skipped)
    with open(summary, "w", encoding="utf-8") as f:
        f.write(f"critest on containerd {runtime}: {len(passed)} passed, {len(failed)} failed "
                f"({len(xfail)} expected), {len(skipped)} skipped of {total} specs\n\n")
        f.write("\n".join(sorted(lines, key=lambda l: (l.split()[0], l))) + "\n")

    for text, e in xfail:
        what = "expected failure" if e["kind"] == "xfail" else "known flake failed"
        print(f"  {what}: {text}")
    for text in unexpected + suite_failures:
        print(f"  UNEXPECTED FAILURE: {text}")
    for text in unlisted:
        print(f"  note: skipped but not listed in {skips_file.split('/')[-1]}: {text}")
    for e in entries:
        if e["kind"] in ("skip", "xfail") and e["hits"] == 0:
            print(f"  note: line {e['line']} ({e['kind']} {e['regex']}) matched no spec on {runtime}")
        if e["kind"] == "xfail" and e["hits"] and not any(x[1] is e for x in xfail):
            print(f"  note: expected failure (line {e['line']}) passed on {runtime}: {e['regex']}")
    bad = len(unexpected) + len(suite_failures)
    if total == 0:
        print("  no spec ran")
        bad = max(bad, 1)
    print(f"RESULT {len(passed)} {len(failed) + len(suite_failures)} {len(skipped)} {len(xfail)} {bad}")
    return 1 if bad else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "skips":
        for e in load(argv[2], argv[3]):
            if e["kind"] == "skip":
                print(e["regex"])
        return 0
    if len(argv) == 6 and argv[1] == "report":
        return report(*argv[2:])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
