#!/bin/bash
set -e
cd /app/textkit
patch -p1 < /app/patches/0001-slug-length-and-title-case.patch || true
# Hunk 1 of textkit.py is rejected: merge it by hand.
python3 - <<'PY'
p = "/app/textkit/textkit.py"
s = open(p).read()
s = s.replace('import unicodedata\n\n\ndef slugify(text):\n    """\'Héllo, World!\' -> \'hello-world\'."""',
              'import unicodedata\n\nSMALL_WORDS = {"a", "an", "and", "at", "in", "of", "on", "or", "the", "to"}\n\n\n'
              'def slugify(text, max_length=None):\n'
              '    """\'Héllo, World!\' -> \'hello-world\'; at most max_length characters if given."""')
s = s.replace('    return text.strip("-") or "n-a"\n',
              '    slug = text.strip("-")\n    if max_length is not None:\n'
              '        slug = slug[:max_length].rstrip("-")\n    return slug or "n-a"\n')
open(p, "w").write(s)
PY
rm -f textkit.py.rej textkit.py.orig CHANGELOG.md.orig CHANGELOG.md.rej
