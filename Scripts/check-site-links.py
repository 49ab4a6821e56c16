#!/usr/bin/python3
"""Checks every internal link of the built documentation site.

Run: /usr/bin/python3 Scripts/check-site-links.py .build/docs/site

Reads every HTML file under the site, collects each element's id (and an
anchor's name), then follows every href and src that stays inside the
site: the file it names must exist (a directory meaning its index.html),
and a #fragment must be an id of the page it points at. A path from the root
(`/css/...`, as in the 404 page) is taken from the site's root. External links
(with a scheme, or starting with //) are not followed. Exits 1 and names
each broken link when one does not resolve.
"""
import html.parser
import os
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []    # (attribute, value, line)

    def handle_starttag(self, tag, attributes):
        for name, value in attributes:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            if name in ("href", "src"):
                self.links.append((name, value, self.getpos()[0]))


def parse(path):
    page = Page()
    with open(path, encoding="utf-8", errors="replace") as handle:
        page.feed(handle.read())
    page.close()
    return page


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check-site-links.py SITE_DIRECTORY")
    site = os.path.abspath(sys.argv[1])
    if not os.path.isfile(os.path.join(site, "index.html")):
        sys.exit(f"check-site-links: no index.html in {site}; build the site first (make docs)")
    pages = {}
    for directory, _, names in os.walk(site):
        for name in names:
            if name.endswith(".html"):
                path = os.path.join(directory, name)
                pages[path] = parse(path)
    broken = []
    checked = 0
    for path, page in sorted(pages.items()):
        for attribute, value, line in page.links:
            parts = urllib.parse.urlsplit(value)
            if parts.scheme or parts.netloc or value.startswith("//"):
                continue
            checked += 1
            where = f"{os.path.relpath(path, site)}:{line}: {attribute}=\"{value}\""
            if parts.path:
                # A path from the root (the 404 page's, served at any depth)
                # is taken as the site's root.
                base = site if parts.path.startswith("/") else os.path.dirname(path)
                target = os.path.normpath(os.path.join(base, urllib.parse.unquote(parts.path).lstrip("/")))
                if not (target == site or target.startswith(site + os.sep)):
                    broken.append(f"{where}: leaves the site")
                    continue
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
                if not os.path.isfile(target):
                    broken.append(f"{where}: no such file")
                    continue
            else:
                target = path
            fragment = urllib.parse.unquote(parts.fragment)
            if fragment:
                if target not in pages:
                    broken.append(f"{where}: a fragment of a file that is not a page")
                elif fragment not in pages[target].ids:
                    broken.append(f"{where}: no id \"{fragment}\" in {os.path.relpath(target, site)}")
    for link in broken:
        print(link, file=sys.stderr)
    print(f"check-site-links: {len(pages)} pages, {checked} internal links, {len(broken)} broken")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
