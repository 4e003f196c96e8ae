#!/usr/bin/env python3
"""Build an English->X parallel corpus from translated documentation in Debian packages.

Stdlib only.  Input: a folder holding Debian binary packages (*.deb, as fetched with
`apt-get download`).  The packages ship the same manual rendered in several languages
(DocBook/publican/po4a HTML, GNOME Mallard .page help, GNU gettext .po files).  Those
renderings come from one source whose paragraphs were translated one by one, so the
block structure of the English and translated document is the same; we pair the
documents by path, cut each into text blocks, align the blocks, then align sentences
within a block pair when both sides have the same number of sentences.  Any .po file
inside the packages is read too (msgid/msgstr pairs).

Usage:
    python3 make_parallel.py DEB_FOLDER OUT_FOLDER [--lang es] [--valid 1000] [--test 1000]

Recipe (Debian 12 "bookworm" archive; English->Spanish):
    mkdir debs && cd debs && chmod 777 . && apt-get update && apt-get download \
        debian-handbook debian-reference-en debian-reference-es maint-guide maint-guide-es \
        aptitude-doc-en aptitude-doc-es installation-guide-amd64 debian-edu-doc-en \
        debian-edu-doc-es gnome-user-docs gimp-help-en gimp-help-es
    cd .. && python3 make_parallel.py debs . --lang es

Every .deb in DEB_FOLDER is read; the output depends only on the packages' contents
(deterministic split on a SHA-256 of the English side).

Writes OUT_FOLDER/{train,valid,test}.jsonl  ({"en": ..., "<lang>": ...} per line) and
prints counts as JSON on stdout.
"""

import argparse
import difflib
import hashlib
import html
import io
import json
import os
import re
import sys
import tarfile
from html.parser import HTMLParser

# --------------------------------------------------------------------------- .deb reading


def deb_members(path):
    """Yield (name, bytes) of the ar members of a .deb."""
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ValueError(f"not a .deb: {path}")
        while True:
            hdr = f.read(60)
            if len(hdr) < 60:
                return
            name = hdr[:16].decode().strip().rstrip("/")
            size = int(hdr[48:58].decode().strip())
            data = f.read(size)
            if size % 2:
                f.read(1)
            yield name, data


def deb_files(path, want):
    """Return {path_in_package: bytes} for the files of a .deb whose path `want` accepts."""
    out = {}
    for name, data in deb_members(path):
        if not name.startswith("data.tar"):
            continue
        mode = {"data.tar.xz": "r:xz", "data.tar.gz": "r:gz", "data.tar.bz2": "r:bz2", "data.tar": "r:"}.get(name)
        if mode is None:
            raise ValueError(f"{path}: unsupported member {name} (zstd?)")
        with tarfile.open(fileobj=io.BytesIO(data), mode=mode) as tf:
            for m in tf:
                if m.isfile():
                    p = m.name.lstrip("./")
                    p = "/" + p
                    if want(p):
                        out[p] = tf.extractfile(m).read()
    return out


# --------------------------------------------------------------------------- language of a path

LANG_PATTERNS = [
    # GNOME help: /usr/share/help/C/doc/...  /usr/share/help/es/doc/...
    re.compile(r"^/usr/share/help/(?P<l>[A-Za-z_@]+)/"),
    # publican / aptitude / installation-guide: .../html/en-US/..., .../html/es/..., .../installation-guide-amd64/es/...
    # gimp-help, kicad-doc, libreoffice-help: .../help/en/..., .../help/en-US/...
    re.compile(r"/(?:html|help|installation-guide-[a-z0-9]+)/(?P<l>[a-z]{2}(?:[-_][A-Z]{2})?)/"),
    # debian-edu-doc: /usr/share/doc/debian-edu-doc-en/...
    re.compile(r"/[a-z0-9.+-]+-doc-(?P<l>[a-z]{2}(?:[-_][a-z]{2})?)/"),
    # po4a HTML: name.en.html, name.es.html
    re.compile(r"\.(?P<l>[a-z]{2}(?:[-_][A-Za-z]{2})?)\.html$"),
]


def norm_lang(code):
    if code == "C":
        return "en"
    return code.split("-")[0].split("_")[0].lower() if code else code


def doc_key(path):
    """(language, key) where key is the path with its language marker removed, or None."""
    for pat in LANG_PATTERNS:
        m = pat.search(path)
        if m:
            lang = norm_lang(m.group("l"))
            key = path[: m.start("l")] + "{L}" + path[m.end("l") :]
            # packages named foo-es ship under /usr/share/doc/foo-es/
            key = re.sub(r"/([a-z0-9.+-]+?)-(?:en|es|fr|de)(?=/)", r"/\1", key)
            return lang, key
    return None


# --------------------------------------------------------------------------- text blocks

BLOCK_TAGS = {
    "p",
    "div",
    "li",
    "dt",
    "dd",
    "td",
    "th",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "title",
    "caption",
    "blockquote",
    "table",
    "tr",
    "ul",
    "ol",
    "dl",
    "section",
    "item",
    "desc",
    "note",
    "body",
    "head",
    "figure",
    "list",
    "terms",
    "tree",
    "steps",
    "links",
    "subtitle",
    "br",
    "tbody",
    "thead",
    "listitem",
    "para",
    "simpara",
    "entry",
    "row",
    "term",
    "varlistentry",
    "page",
}
SKIP_TAGS = {
    "pre",
    "script",
    "style",
    "screen",
    "programlisting",
    "code-block",
    "info",
    "synopsis",
    "media",
    "svg",
    "math",
    "comment",
}
# inline elements whose content is untranslatable: used in the alignment signature
CODE_TAGS = {"code", "cmd", "sys", "file", "tt", "command", "filename", "literal", "var", "output", "input"}
NAV_CLASSES = {
    "docnav",
    "navheader",
    "navfooter",
    "toc",
    "index",
    "legalnotice",
    "revhistory",
    "footnotes",
    "author",
    "authorgroup",
    "othercredit",
    "copyright",
    "list-of-tables",
    "list-of-examples",
    "list-of-figures",
    "breadcrumb",
    "mw-navigation",
    "calloutlist",
}
VOID = {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr", "embed", "source"}


class BlockParser(HTMLParser):
    """Cut an HTML or Mallard/XML document into text blocks.

    A block is the text between two block-level tag boundaries; code inside it is kept as
    text, but the code strings are also collected for the alignment signature."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks = []  # (tag, text, codes)
        self.buf = []
        self.codes = []
        self.codebuf = None
        self.code_depth = 0
        self.skip = 0
        self.stack = []  # (tag, skipping?) for nesting
        self.cur_tag = "body"

    def flush(self):
        text = " ".join("".join(self.buf).split())
        if text:
            self.blocks.append((self.cur_tag, text, tuple(self.codes)))
        self.buf = []
        self.codes = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID:
            if tag == "br" and not self.skip:
                self.buf.append(" ")
            return
        a = dict(attrs)
        cls = set((a.get("class") or "").split()) | {a.get("id") or ""}
        skipping = (
            tag in SKIP_TAGS
            or bool(cls & NAV_CLASSES)
            or "programlisting" in cls
            or "screen" in cls
            or "synopsis" in cls
            or "literallayout" in cls
        )
        if tag in ("title",) and self.stack and self.stack[-1][0] == "head":
            skipping = True
        is_code = (
            not skipping and not self.skip and tag not in BLOCK_TAGS and (tag in CODE_TAGS or bool(cls & CODE_TAGS))
        )
        self.stack.append((tag, skipping, is_code))
        if skipping:
            self.skip += 1
        if self.skip:
            return
        if tag in BLOCK_TAGS:
            self.flush()
            self.cur_tag = tag
        elif is_code:
            self.code_depth += 1
            if self.code_depth == 1:
                self.codebuf = []

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        # pop to the matching tag (tolerate bad nesting)
        idx = None
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                idx = i
                break
        if idx is None:
            return
        popped = self.stack[idx:]
        del self.stack[idx:]
        was_skip = self.skip
        for _tag, s, c in popped:
            if s:
                self.skip -= 1
            if c and not was_skip:
                self.code_depth -= 1
                if self.code_depth == 0:
                    code = " ".join("".join(self.codebuf or []).split())
                    if code:
                        self.codes.append(code)
                    self.codebuf = None
        if was_skip:
            return
        if tag in BLOCK_TAGS:
            self.flush()
            self.cur_tag = self.stack[-1][0] if self.stack else "body"

    def handle_data(self, data):
        if self.skip:
            return
        self.buf.append(data)
        if self.codebuf is not None:
            self.codebuf.append(data)


def blocks_of(raw):
    text = raw.decode("utf-8", errors="replace")
    p = BlockParser()
    try:
        p.feed(text)
        p.close()
    except Exception:  # malformed markup: keep what was parsed
        pass
    p.flush()
    return p.blocks


NUM = re.compile(r"\d+(?:[.,]\d+)*")


def signature(block):
    tag, text, codes = block
    return (tag, tuple(NUM.findall(text)), codes)


def align_blocks(a, b):
    """Pairs of blocks; zip when the structure matches, else match on signatures."""
    if len(a) == len(b) and all(x[0] == y[0] for x, y in zip(a, b)):
        return list(zip(a, b))
    sa = [signature(x) for x in a]
    sb = [signature(y) for y in b]
    sm = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
    out = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1):
            for k in range(i2 - i1):
                if op == "equal" or a[i1 + k][0] == b[j1 + k][0]:
                    out.append((a[i1 + k], b[j1 + k]))
    return out


# --------------------------------------------------------------------------- .po files


def po_unquote(s):
    s = s.strip()
    if s.startswith('"') and s.endswith('"'):
        s = s[1:-1]
    return s.replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")


def po_entries(text):
    """Yield (msgid, msgstr) of translated, non-fuzzy, singular entries of a .po file."""
    entry = {}
    field = None
    flags = ""

    def done():
        if (
            entry.get("msgid")
            and entry.get("msgstr")
            and "fuzzy" not in flags
            and "msgid_plural" not in entry
            and "msgctxt" not in entry
        ):
            return entry["msgid"], entry["msgstr"]
        return None

    for line in text.splitlines() + [""]:
        line = line.strip()
        if not line:
            r = done()
            if r:
                yield r
            entry, field, flags = {}, None, ""
            continue
        if line.startswith("#,"):
            flags += line
            continue
        if line.startswith("#"):
            continue
        m = re.match(r"(msgctxt|msgid_plural|msgid|msgstr(?:\[0\])?)\s+(\".*\")$", line)
        if m:
            if m.group(1) == "msgid" and "msgid" in entry:  # no blank line between entries
                r = done()
                if r:
                    yield r
                entry, flags = {}, ""
            field = m.group(1).replace("[0]", "")
            entry[field] = po_unquote(m.group(2))
        elif line.startswith('"') and field:
            entry[field] += po_unquote(line)


TAG = re.compile(r"<[^<>]{0,200}>")


def po_clean(s):
    s = TAG.sub("", s)  # po4a/DocBook markup like <emphasis>…</emphasis>
    s = html.unescape(s)  # &lt; &gt; &amp; …
    return " ".join(s.split())


# --------------------------------------------------------------------------- sentences and filters

ABBREV = {
    "e.g",
    "i.e",
    "etc",
    "cf",
    "vs",
    "mr",
    "dr",
    "st",
    "p.ej",
    "ej",
    "p. ej",
    "sr",
    "sra",
    "núm",
    "no",
    "fig",
    "ver",
    "approx",
    "véase",
    "art",
    "vol",
    "pág",
    "z.b",
    "bzw",
    "usw",
    "d.h",
    "ca",
    "p.ex",
    "ex",
    "env",
    "mme",
    "m",
    "nr",
    "inc",
    "ltd",
    "jr",
    "u.a",
    "s",
}
SENT_END = re.compile(r"(?<=[.!?:;])[\"'»”)\]]*\s+(?=[\"'«“(¿¡]*[A-ZÁÉÍÓÚÑÀÈÌÒÙÂÊÎÔÛÇÄÖÜ0-9])")


def split_sentences(text):
    parts = []
    start = 0
    for m in SENT_END.finditer(text):
        chunk = text[start : m.start()]
        if chunk.endswith(":") or chunk.endswith(";"):
            continue  # keep colons/semicolons inside the sentence
        last = chunk.rstrip(".!?\"'»”)]").split()
        lw = last[-1].lower() if last else ""
        if chunk.endswith(".") and (lw in ABBREV or len(lw) == 1):
            continue
        parts.append(text[start : m.end()].strip())
        start = m.end()
    parts.append(text[start:].strip())
    return [p for p in parts if p]


URL = re.compile(r"(https?://|ftp://|www\.)\S+|\S+@\S+\.\w+")
WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)


def words(s):
    return s.split()


STOP = {
    "en": set("the of and to is are in that this with for you your be it can by from which".split()),
    "es": set("el la los las de del que y en es un una por con para se su al lo".split()),
    "fr": set("le la les de des du que et en est un une pour dans sur avec pas vous".split()),
    "de": set("der die das und ist zu den mit von sie nicht ein eine für auf wird".split()),
}
TARGET = "es"


def looks_english(s):
    """True when the target side reads as English (an untranslated or misplaced paragraph)."""
    ws = [w.strip(".,;:()«»“”\"'").lower() for w in s.split()]
    en = sum(w in STOP["en"] for w in ws)
    tr = sum(w in STOP.get(TARGET, ()) for w in ws)
    return en >= 2 and en > tr


def prose_ok(en, tr, lo, hi):
    we, wt = len(words(en)), len(words(tr))
    if not (lo <= we <= hi and lo <= wt <= hi):
        return False
    if en == tr or looks_english(tr):  # untranslated
        return False
    ce, ct = len(en), len(tr)
    if not (0.5 <= ct / ce <= 2.0):
        return False
    for s in (en, tr):
        if len(URL.sub("", s).split()) < lo:
            return False
        letters = sum(ch.isalpha() for ch in s)
        if letters < 0.6 * len(s.replace(" ", "")):
            return False  # mostly code, paths, numbers
        if len(WORD.findall(s)) < 0.6 * len(s.split()):
            return False
        if s.count("$ ") + s.count("# ") >= 2 or "{" in s or "}" in s:
            return False
    # the translation should not be the English text with a few words changed
    if difflib.SequenceMatcher(None, en.lower().split(), tr.lower().split(), autojunk=False).ratio() > 0.6:
        return False
    # sentences must agree on terminal punctuation class
    if (en[-1] in ".!?") != (tr[-1] in ".!?"):
        return False
    return True


def pairs_of_blocks(en, tr, lo, hi):
    """Sentence pairs when both sides split into the same number of sentences, else the block."""
    if en == tr:
        return []
    se, st = split_sentences(en), split_sentences(tr)
    if len(se) == len(st) and len(se) > 1:
        ratios = [len(b) / max(1, len(a)) for a, b in zip(se, st)]
        if all(0.5 <= r <= 2.0 for r in ratios):
            return [(a, b) for a, b in zip(se, st) if prose_ok(a, b, lo, hi)]
    return [(en, tr)] if prose_ok(en, tr, lo, hi) else []


# --------------------------------------------------------------------------- main


def want(path):
    return path.endswith((".html", ".page", ".po")) and "/Common_Content/" not in path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("debs", help="folder with the .deb files")
    ap.add_argument("out", help="output folder")
    ap.add_argument("--lang", default="es")
    ap.add_argument("--valid", type=int, default=1000)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--min-words", type=int, default=3)
    ap.add_argument("--max-words", type=int, default=60)
    args = ap.parse_args()
    lang = args.lang
    global TARGET
    TARGET = lang

    debs = sorted(f for f in os.listdir(args.debs) if f.endswith(".deb"))
    files = {}  # key -> {lang: (pkg, bytes)}
    po_pairs = []
    per_pkg = {}
    for deb in debs:
        pkg = deb.split("_")[0]
        for path, raw in deb_files(os.path.join(args.debs, deb), want).items():
            if path.endswith(".po"):
                m = re.search(r"(?:^|[/._-])([a-z]{2})(?:_[A-Z]{2})?\.po$", path)
                if m and m.group(1) == lang:
                    for a, b in po_entries(raw.decode("utf-8", errors="replace")):
                        po_pairs.append((pkg, po_clean(a), po_clean(b)))
                continue
            dk = doc_key(path)
            if dk is None:
                continue
            language, key = dk
            if language in ("en", lang):
                files.setdefault(key, {})[language] = (pkg, raw)

    seen = set()
    rows = []  # (source package, en, tr)

    def add(pkg, en, tr):
        k = en
        if k in seen:
            return
        seen.add(k)
        rows.append((pkg, en, tr))
        per_pkg[pkg] = per_pkg.get(pkg, 0) + 1

    for key in sorted(files):
        d = files[key]
        if "en" not in d or lang not in d:
            continue
        pkg = d[lang][0]
        be, bt = blocks_of(d["en"][1]), blocks_of(d[lang][1])
        for x, y in align_blocks(be, bt):
            for a, b in pairs_of_blocks(x[1], y[1], args.min_words, args.max_words):
                add(pkg, a, b)
    for pkg, a, b in po_pairs:
        for x, y in pairs_of_blocks(a, b, args.min_words, args.max_words):
            add(pkg, x, y)

    # deterministic split on a hash of the English side
    def h(s):
        return int(hashlib.sha256(s.encode("utf-8")).hexdigest()[:12], 16)

    rows.sort(key=lambda r: h(r[1]))
    test, valid, train = rows[: args.test], rows[args.test : args.test + args.valid], rows[args.test + args.valid :]
    train.sort(key=lambda r: (r[0], h(r[1])))
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        with open(os.path.join(args.out, name + ".jsonl"), "w", encoding="utf-8") as f:
            for _, a, b in part:
                f.write(json.dumps({"en": a, lang: b}, ensure_ascii=False) + "\n")
        n = max(1, len(part))
        stats[name] = {
            "pairs": len(part),
            "mean_words_en": round(sum(len(a.split()) for _, a, _ in part) / n, 1),
            "mean_words_" + lang: round(sum(len(b.split()) for _, _, b in part) / n, 1),
        }
    stats["per_package"] = per_pkg
    print(json.dumps(stats, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    sys.exit(main())
