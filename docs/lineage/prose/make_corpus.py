#!/usr/bin/env python3
"""Build an English-prose corpus (Jane Austen's six novels) from a Debian package.

Stdlib only, deterministic.  Input: a folder holding the Debian binary package
r-cran-janeaustenr (*.deb, as fetched with `apt-get download`).  The package ships the
Project Gutenberg texts of Austen's six completed novels (public domain) as character
vectors inside an R lazy-load database (data/Rdata.rdb: zlib-compressed R serialisation,
version 2/3, XDR).  A minimal R unserialiser below reads every character vector in it.

Cleaning: drops chapter/volume headings, "THE END", title lines (all-caps), the
"FINIS"-style lines; joins the hard-wrapped lines into paragraphs; strips Gutenberg
_italics_ underscores; splits paragraphs into sentences with a simple rule-based
splitter (., !, ? followed by space and an upper-case letter or quote, not after common
abbreviations such as Mr. Mrs. Dr. St.).

Also drops front matter ("By Jane Austen", "by" / "Jane Austen (1803)") and the
editor's note after Northanger Abbey ("The Signet Classic text is based on ...").

Split BY BOOK (no interleaving): train = Emma, Mansfield Park, Pride and Prejudice,
Persuasion, Sense and Sensibility; the held-out book Northanger Abbey is cut by
contiguous chapters: first half of its chapters -> valid, second half -> test
(about 89/5/6 by words).

Usage:
    python3 make_corpus.py DEB_FOLDER OUT_FOLDER

Recipe (Debian 12 "bookworm" archive):
    mkdir debs && chmod 777 debs && cd debs && apt-get update && \
        apt-get download r-cran-janeaustenr        # 1.0.0-1
    cd .. && python3 make_corpus.py debs OUT

Writes OUT_FOLDER/{train,valid,test}.txt (one sentence a line, UTF-8, no blank lines)
and prints counts as JSON on stdout.
"""

import io
import json
import os
import re
import struct
import sys
import tarfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "translation"))
from make_parallel import deb_members  # noqa: E402  (the sibling builder's .deb reader: ar members as bytes)


def deb_file(path, suffix):
    for name, data in deb_members(path):
        if not name.startswith("data.tar"):
            continue
        mode = {"data.tar.xz": "r:xz", "data.tar.gz": "r:gz", "data.tar.bz2": "r:bz2", "data.tar": "r:"}[name]
        with tarfile.open(fileobj=io.BytesIO(data), mode=mode) as tf:
            for m in tf:
                if m.isfile() and m.name.endswith(suffix):
                    return tf.extractfile(m).read()
    return None


# --------------------------------------------------------------------------- R unserialise


class RReader:
    """Minimal XDR R unserialiser: returns nested Python lists; STRSXP -> list of str."""

    def __init__(self, b):
        self.b, self.p, self.refs = b, 0, []

    def i(self):
        v = struct.unpack(">i", self.b[self.p:self.p + 4])[0]
        self.p += 4
        return v

    def run(self):
        assert self.b[:2] == b"X\n", self.b[:2]
        self.p = 2
        ver = self.i()
        self.i()  # the R version that wrote the file
        self.i()  # the oldest R version that reads it
        if ver == 3:
            n = self.i()
            self.p += n
        return self.item()

    def item(self):
        flags = self.i()
        t = flags & 0xFF
        has_attr, has_tag = flags & 0x200, flags & 0x400
        if t in (254, 242, 253, 251, 250, 252):  # NILVALUE, EMPTYENV, GLOBALENV, BASEENV, ...
            return None
        if t == 255:  # REFSXP
            idx = flags >> 8
            if idx == 0:
                idx = self.i()
            return self.refs[idx - 1]
        if t == 1:  # SYMSXP
            s = self.item()
            self.refs.append(s)
            return s
        if t == 9:  # CHARSXP
            n = self.i()
            if n == -1:
                return None
            s = self.b[self.p:self.p + n].decode("utf-8", "replace")
            self.p += n
            return s
        if t in (2, 6, 17, 5):  # LISTSXP, LANGSXP, DOTSXP, PROMSXP (pairlists)
            out = []
            while True:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out.append((tag, self.item()))
                flags = self.i()
                t = flags & 0xFF
                has_attr, has_tag = flags & 0x200, flags & 0x400
                if t not in (2, 6, 17, 5):
                    self.p -= 4
                    self.item()  # the attribute's value, skipped
                    return out
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self.i()
            v = list(struct.unpack(f">{n}i", self.b[self.p:self.p + 4 * n]))
            self.p += 4 * n
        elif t == 14:  # REALSXP
            n = self.i()
            v = list(struct.unpack(f">{n}d", self.b[self.p:self.p + 8 * n]))
            self.p += 8 * n
        elif t in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            n = self.i()
            v = [self.item() for _ in range(n)]
        else:
            raise ValueError(f"unsupported SEXP type {t} at {self.p}")
        if has_attr:
            self.item()
        return v


def rdb_objects(rdb):
    """Yield each unserialised object of an R lazy-load .rdb (chunks: 4-byte len + zlib)."""
    p = 0
    while p < len(rdb):
        d = zlib.decompressobj()
        raw = d.decompress(rdb[p + 4:])
        p = len(rdb) - len(d.unused_data)
        yield RReader(raw).run()


def walk_strings(o):
    if isinstance(o, list):
        if o and all(isinstance(x, str) or x is None for x in o) and len(o) > 1000:
            yield o
        else:
            for x in o:
                yield from walk_strings(x[1] if isinstance(x, tuple) else x)


# --------------------------------------------------------------------------- cleaning

HEAD = re.compile(r"^(CHAPTER|Chapter|VOLUME|Volume|THE END|FINIS|PREFACE|ADVERTISEMENT)\b.*$|^[IVXLC]+\.?$|^[^a-z]*$")
ABBR = re.compile(r"(?:\b(?:Mr|Mrs|Dr|St|Messrs|Col|Capt|Gen|Lt|Rev|Sir|viz|i\.e|e\.g|etc)\.|\b[A-Z]\.)$")
SPLIT_RE = re.compile(r'(?<=[.!?])(["\u201d\']*)\s+(?=["\u201c\'(]*[A-Z])')


def paragraphs(lines):
    buf = []
    for ln in lines + [""]:
        s = (ln or "").strip()
        if not s or HEAD.match(s):
            if buf:
                yield " ".join(buf)
            buf = []
            continue
        buf.append(s)


DROP = re.compile(r"^(by|by Jane Austen|Jane Austen( \(\d{4}\))?)$|^The Signet Classic text|^Spelling and punctuation have been|^Northanger Abbey was written in|^The manuscript was revised around", re.I)


def sentences(par):
    if DROP.match(par.strip()):
        return []
    par = re.sub(r"_", "", par)
    par = re.sub(r"\s+", " ", par).strip()
    out, start = [], 0
    for m in SPLIT_RE.finditer(par):
        end = m.end(1)
        if ABBR.search(par[start:m.start()]):
            continue
        out.append(par[start:end].strip())
        start = m.end()
    out.append(par[start:].strip())
    return [s for s in out if s and not DROP.match(s)]


def chapters(lines):
    """Split a book's lines at CHAPTER headings -> list of line lists."""
    chs, cur = [], []
    for ln in lines:
        if ln and re.match(r"^\s*(CHAPTER|Chapter)\b", ln):
            chs.append(cur)
            cur = []
        cur.append(ln or "")
    chs.append(cur)
    return [c for c in chs if any((x or "").strip() for x in c)]


def main():
    deb_dir, out_dir = sys.argv[1], sys.argv[2]
    debs = sorted(f for f in os.listdir(deb_dir) if f.startswith("r-cran-janeaustenr") and f.endswith(".deb"))
    rdb = deb_file(os.path.join(deb_dir, debs[-1]), "/data/Rdata.rdb")
    books = {}
    for obj in rdb_objects(rdb):
        for vec in walk_strings(obj):
            title = next((x.strip() for x in vec if x and x.strip()), "?")
            books.setdefault(title, vec)
    titles = sorted(books)
    # Held-out book: Northanger Abbey -> first half of its chapters valid, second half test.
    held = next(t for t in titles if "NORTHANGER" in t.upper())
    split = {"train": [], "valid": [], "test": []}
    for t in titles:
        chs = chapters(books[t])
        if t == held:
            h = len(chs) // 2
            parts = [("valid", chs[:h]), ("test", chs[h:])]
        else:
            parts = [("train", chs)]
        for name, cs in parts:
            for c in cs:
                for par in paragraphs(c):
                    split[name].extend(sentences(par))
    os.makedirs(out_dir, exist_ok=True)
    counts = {"books": titles, "held_out": held}
    for name, sents in split.items():
        with open(os.path.join(out_dir, name + ".txt"), "w", encoding="utf-8") as f:
            for s in sents:
                f.write(s + "\n")
        w = sum(len(s.split()) for s in sents)
        counts[name] = {"lines": len(sents), "words": w, "mean_words_per_line": round(w / max(1, len(sents)), 2)}
    print(json.dumps(counts, indent=1))


if __name__ == "__main__":
    main()
