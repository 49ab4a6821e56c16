#!/usr/bin/python3
"""Stages the documentation site's Markdown for MkDocs (see mkdocs.yml).

Run: /usr/bin/python3 Scripts/stage-docs.py .build/docs/src

The site is the repository's own pages, at their own paths: README.md (the
front page; MkDocs makes a README.md its directory's index.html), every
docs/*.md, and every Markdown file those link to, followed link by link
(examples/README.md, the clients' READMEs, Scripts/admin/README.md, ...).
Because the paths are the repository's, a relative link that works on a
repository browser works in the site unchanged, and the pages need no
rewriting to be built.

The exceptions are links to what a site cannot serve as a page. An image
is copied beside its page. Any other file or directory of the repository
(a source file, a script, deploy/backup/) has no page in the site, so the
staged copy names it in code instead of linking to it; the count is
printed. A relative link to something that does not exist stops the
staging.

One difference between the two renderers is smoothed over: a | inside a
code span of a table row is written \\| for GitHub, and staged as | for
Python-Markdown.
"""
import os
import re
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg")


def is_relative(target):
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith(("#", "/"))


def links_outside_code(line, rewrite):
    """Rewrites the links of a line that do not start inside an inline code
    span (a link's text may hold one)."""
    spans = [match.span() for match in re.finditer(r"(`+)[^`]*?\1", line)]

    def replace(match):
        inside = any(start < match.start() < end for start, end in spans)
        return match.group(0) if inside else rewrite(match)

    return LINK.sub(replace, line)


def unescape_table_code(line):
    """GitHub splits a table row at every unescaped |, code spans included,
    so the pages write \\| there; Python-Markdown keeps a code span whole
    and would show the backslash."""
    return re.sub(r"(`+)([^`]*?)\1", lambda match: match.group(0).replace("\\|", "|"), line)


class Stager:
    def __init__(self, destination):
        self.destination = destination
        self.pages = []
        self.queued = set()
        self.unlinked = []
        self.copied = set()

    def queue(self, path):
        path = os.path.normpath(path)
        if path not in self.queued:
            self.queued.add(path)
            self.pages.append(path)

    def stage(self, page):
        """Copies one page, with links to files the site has no page for
        named in code; queues the pages it links to."""
        with open(os.path.join(REPO, page), encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        directory = os.path.dirname(page)
        in_fence = None

        def rewrite_link(match):
            bang, text, target = match.group(1), match.group(2), match.group(3)
            if not is_relative(target):
                return match.group(0)
            path = target.split("#", 1)[0]
            if not path:
                return match.group(0)
            resolved = os.path.normpath(os.path.join(directory, path))
            absolute = os.path.join(REPO, resolved)
            if resolved.startswith("..") or not os.path.exists(absolute):
                raise SystemExit(f"stage-docs: {page} links to {target}, which does not exist")
            if os.path.isfile(absolute) and resolved.endswith(".md"):
                self.queue(resolved)
                return match.group(0)
            if bang and os.path.isfile(absolute) and resolved.lower().endswith(IMAGE_SUFFIXES):
                self.copy(resolved)
                return match.group(0)
            self.unlinked.append(f"{page}: {target}")
            if not text.startswith("`") and text.rstrip("/") == path.rstrip("/"):
                return f"`{text}`"    # a bare path reads as one
            return text

        staged = []
        for line in lines:
            fence = FENCE.match(line)
            if fence:
                marker = fence.group(1)
                if in_fence is None:
                    in_fence = marker[0] * len(marker)
                elif line.strip().startswith(in_fence) and not line.strip()[len(in_fence):].strip():
                    in_fence = None
                staged.append(line)
                continue
            if in_fence:
                staged.append(line)
                continue
            line = links_outside_code(line, rewrite_link)
            if line.lstrip().startswith("|"):
                line = unescape_table_code(line)
            staged.append(line)
        target = os.path.join(self.destination, page)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as handle:
            handle.write("\n".join(staged))

    def copy(self, path):
        if path not in self.copied:
            self.copied.add(path)
            target = os.path.join(self.destination, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(REPO, path), target)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: stage-docs.py DESTINATION")
    destination = os.path.abspath(sys.argv[1])
    if os.path.exists(destination):
        shutil.rmtree(destination)
    os.makedirs(destination)
    stager = Stager(destination)
    stager.queue("README.md")
    for name in sorted(os.listdir(os.path.join(REPO, "docs"))):
        if name.endswith(".md"):
            stager.queue(os.path.join("docs", name))
    index = 0
    while index < len(stager.pages):
        stager.stage(stager.pages[index])
        index += 1
    print(f"stage-docs: {len(stager.pages)} pages and {len(stager.copied)} images in {sys.argv[1]}; "
          f"{len(stager.unlinked)} links to repository files shown as code")
    for link in stager.unlinked:
        print(f"  {link}")


if __name__ == "__main__":
    main()
