#!/usr/bin/env python3
"""taskbox-config(5) says what schemas/config.md says, and schemas/config.md
says what the program does:

 - every key of config.md's table is a key of the program (`taskbox config
   show --json`), and every key of the program is in the table;
 - each key's default in the table is the program's own (the default
   cell's first `code`, or its number; "none" for a key left unset),
   shown for a file that gives nothing but "v";
 - the page, as man renders it, has each key of the table with its type,
   default and meaning, and every paragraph of config.md, word for word
   (whitespace aside: the page is filled and broken as groff likes).

    check_config_page.py TASKBOX SOURCE_DIR PAGE

The page is written from config.md by worker/cli/configpage.sh; this
checks what came out, and config.md against the code. Exit 0 when all
agree, 1 with each disagreement named, 77 (ctest's skip) without man(1).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BAR = "\x01"  # an escaped | inside a table cell, while the row is split


def md_text(s):
    """Markdown inline text as a reader sees it: code spans as they are,
    without their backticks; elsewhere no **, a link's text for the link;
    the pipe unescaped."""
    parts = s.replace("\\|", "|").split("`")
    for i in range(0, len(parts), 2):  # outside the code spans
        parts[i] = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", parts[i].replace("**", ""))
    return "".join(parts)


def squeezed(s):
    """@p s with no whitespace, and the characters groff may render for
    ASCII ones (hyphens, minus signs, quotes, the ellipsis) as ASCII."""
    for fancy, plain in (("\u2010", "-"), ("\u2212", "-"), ("\u2019", "'"), ("\u2018", "`"),
                         ("\u201c", '"'), ("\u201d", '"'), ("\u2026", "...")):
        s = s.replace(fancy, plain)
    return re.sub(r"\s+", "", s)


def table_and_paragraphs(md):
    rows, paragraphs, para = [], [], []
    for line in md.splitlines()[1:]:  # the title is the page's NAME
        if line.startswith("|"):
            cells = [c.strip().replace(BAR, "|")
                     for c in line.replace("\\|", BAR).strip("|").split("|")]
            if cells[0].startswith("`"):
                rows.append(cells)
            continue
        if line.strip():
            para.append(line)
        elif para:
            paragraphs.append(" ".join(para))
            para = []
    if para:
        paragraphs.append(" ".join(para))
    return rows, paragraphs


def documented_default(cell):
    """The default a cell names: its first `code` ("" for `""`), else its
    leading number, else None ("none", "(required in files)")."""
    m = re.match(r"`([^`]*)`", cell) or re.match(r"(\d+)\b", cell)
    if not m:
        return None
    return "" if m.group(1) == '""' else m.group(1)


def program_keys(taskbox):
    """`taskbox config show --json` for a file of nothing but "v", with no
    TASKBOX_* variable: every key and its default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKBOX_")}
    env["LSAN_OPTIONS"] = env.get("LSAN_OPTIONS", "") or "detect_leaks=0"
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write('{"v": 1}\n')
        f.flush()
        out = subprocess.run([taskbox, "config", "show", "--json", "--config", f.name],
                             env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)["keys"]


def rendered(page):
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="100")
    env.pop("MAN_KEEP_FORMATTING", None)
    return subprocess.run(["man", "-E", "UTF-8", "-l", page], env=env, capture_output=True,
                          text=True, check=True).stdout


def main():
    taskbox, root, page = sys.argv[1:4]
    if not shutil.which("man"):
        print("SKIP: no man(1) (man-db, deploy/local/install-deps test)")
        return 77
    rows, paragraphs = table_and_paragraphs(open(os.path.join(root, "schemas/config.md")).read())
    keys = program_keys(taskbox)
    text = squeezed(rendered(page))
    bad = []

    table = [md_text(r[0]) for r in rows]
    for k in sorted(set(table) ^ set(keys)):
        bad.append(f"key {k}: " + ("in schemas/config.md's table, not in the program"
                                   if k in table else "in the program, not in schemas/config.md"))
    for key, typ, default, meaning in rows:
        key = md_text(key)
        want = documented_default(default)
        if key in keys and key != "v":
            got = keys[key]["value"]
            got = None if got is None else json.dumps(got) if isinstance(got, bool) else str(got)
            if got != want:
                bad.append(f"{key}: schemas/config.md says the default is {want!r}, "
                           f"the program {got!r}")
        for what, said in (("type and default", f"{key} Type: {md_text(typ)}. "
                                                 f"Default: {md_text(default)}."),
                           ("meaning", md_text(meaning))):
            if squeezed(said) not in text:
                bad.append(f"{key}: its {what} not in the page as config.md has it: {said!r}")
    for p in paragraphs:
        p = re.sub(r"^\*\*[^*]+\*\* ", "", p)  # a subsection's title
        if squeezed(md_text(p)) not in text:
            bad.append(f"a paragraph of config.md not in the page: {p[:70]!r}...")

    for b in bad:
        print("FAIL", b)
    print(f"{len(rows)} keys, {len(paragraphs)} paragraphs: "
          + ("the page, the schema and the program agree" if not bad else f"{len(bad)} failed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
