#!/usr/bin/env python3
"""The mutation score of one or more cargo-mutants runs, by file.

Usage: chaos/mutants/summarize.py [--markdown] [--current LIST] DIR [DIR ...]

Each DIR is a cargo-mutants output directory (the `mutants.out` that
chaos/mutants/score.sh leaves, or a directory holding one). A mutant's
outcome is read from its caught.txt, missed.txt, timeout.txt and
unviable.txt; where several DIRs name the same mutant, the later one wins
(a re-run after a new check replaces the old verdict).

Survivors are classed by chaos/mutants/verdicts.tsv (MUTANT<TAB>CLASS<TAB>WHY,
CLASS `equivalent`: no observable behaviour changes, or `outside`: it
changes only what no promise of chaos/PROTOCOL.md covers, e.g. a CLI tool
the harness never runs). The score counts them out; the strict score
does not. A timeout is counted as caught (the harness saw a store that
never answers) and listed.

--current LIST: count only the mutants LIST names (one per line, as
`cargo mutants --list` prints them for score.sh's files): outcomes of
mutants the code no longer has are left out.
"""

import collections
import os
import sys

OUTCOMES = ("caught", "missed", "timeout", "unviable")
HERE = os.path.dirname(os.path.abspath(__file__))


def outcome_dir(path):
    inner = os.path.join(path, "mutants.out")
    return inner if os.path.isdir(inner) else path


def read_outcomes(dirs):
    outcome = {}
    for d in dirs:
        d = outcome_dir(d)
        if not any(os.path.exists(os.path.join(d, f"{o}.txt")) for o in OUTCOMES):
            sys.exit(f"summarize.py: {d}: no caught.txt, missed.txt, timeout.txt or unviable.txt")
        for o in OUTCOMES:
            p = os.path.join(d, f"{o}.txt")
            if os.path.exists(p):
                with open(p) as f:
                    for line in f:
                        name = line.strip()
                        if name:
                            outcome[name] = o
    return outcome


def read_verdicts():
    verdicts = {}
    path = os.path.join(HERE, "verdicts.tsv")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3 or parts[1] not in ("equivalent", "outside"):
                sys.exit(f"summarize.py: {path}:{n}: not MUTANT<TAB>equivalent|outside<TAB>WHY")
            verdicts[parts[0]] = (parts[1], parts[2])
    return verdicts


def main(argv):
    markdown = "--markdown" in argv
    argv = [a for a in argv if a != "--markdown"]
    current = None
    if "--current" in argv:
        i = argv.index("--current")
        if i + 1 >= len(argv):
            sys.exit("summarize.py: --current needs a file")
        with open(argv[i + 1]) as f:
            current = {line.strip() for line in f if line.strip()}
        argv = argv[:i] + argv[i + 2:]
    dirs = argv
    if not dirs:
        sys.exit(__doc__.strip().splitlines()[2])
    outcome = read_outcomes(dirs)
    if current is not None:
        outcome = {n: o for n, o in outcome.items() if n in current}
    verdicts = read_verdicts()
    rows = collections.defaultdict(collections.Counter)
    survivors = []
    for name, o in sorted(outcome.items()):
        file = name.split(":", 1)[0]
        rows[file][o] += 1
        if o == "missed":
            cls = verdicts.get(name, ("gap", ""))[0]
            rows[file][cls] += 1
            survivors.append((name, cls, verdicts.get(name, ("", ""))[1]))
    total = collections.Counter()
    for r in rows.values():
        total.update(r)

    def score(r):
        caught = r["caught"] + r["timeout"]
        viable = caught + r["missed"]
        judged = viable - r["equivalent"] - r["outside"]
        pct = lambda a, b: f"{100 * a / b:.0f} %" if b else "n/a"
        return caught, viable, judged, pct(caught, judged), pct(caught, viable)

    head = ["file", "mutants", "unviable", "caught", "timeout", "missed",
            "equivalent", "outside", "gaps", "score", "strict"]
    lines = []
    for file in sorted(rows) + ["all"]:
        r = total if file == "all" else rows[file]
        caught, viable, judged, s, strict = score(r)
        lines.append([file, sum(r[o] for o in OUTCOMES), r["unviable"], r["caught"],
                      r["timeout"], r["missed"], r["equivalent"], r["outside"], r["gap"],
                      f"{s} ({caught}/{judged})", f"{strict} ({caught}/{viable})"])
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for l in lines:
            print("| " + " | ".join(f"`{c}`" if i == 0 and c != "all" else str(c)
                                    for i, c in enumerate(l)) + " |")
    else:
        width = max(len(l[0]) for l in lines)
        print(f"{'file':<{width}}  " + "  ".join(head[1:]))
        for l in lines:
            print(f"{l[0]:<{width}}  " + "  ".join(str(c) for c in l[1:]))
    print()
    for name, cls, why in survivors:
        print(f"{'- ' if markdown else ''}{cls}: {name}" + (f": {why}" if why else ""))
    stale = sorted(set(verdicts) - set(outcome))
    for name in stale:
        print(f"summarize.py: verdicts.tsv names a mutant no run reported: {name}", file=sys.stderr)
    timeouts = sorted(n for n, o in outcome.items() if o == "timeout")
    for name in timeouts:
        print(f"timeout (counted caught): {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
