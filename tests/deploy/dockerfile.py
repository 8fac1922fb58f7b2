"""Reading a Dockerfile and its .dockerignore: what check_deploy.py
checks and dockerfile_build.py carries out."""
import fnmatch


def instructions(text):
    """[(INSTRUCTION, args)] with continuations joined and comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        ins, _, args = cur.partition(" ")
        out.append((ins.upper(), args.strip()))
        cur = ""
    return out


def stages(ins):
    """[(name or None, image, [(INSTRUCTION, args)])], one per FROM, and
    the ARGs given before the first FROM (global: usable in FROM)."""
    out, before = [], []
    for i, a in ins:
        if i == "FROM":
            words = a.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            out.append((name, words[0], []))
        elif out:
            out[-1][2].append((i, a))
        else:
            before.append((i, a))
    return out, before


def ignore_patterns(text):
    """The patterns of a .dockerignore, comments and blank lines dropped."""
    return [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]


def dockerignore_excludes(patterns, path):
    """Whether @p path (relative to the context) is excluded: the last
    matching pattern decides, '!' letting a path back in."""
    excluded = False
    for p in patterns:
        neg = p.startswith("!")
        pat = p[1:] if neg else p
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
            excluded = not neg
    return excluded
