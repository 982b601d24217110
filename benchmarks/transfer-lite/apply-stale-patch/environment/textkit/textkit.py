"""Text helpers."""
import re
import unicodedata


def slugify(text):
    """'Héllo, World!' -> 'hello-world'."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = text.lower()
    text = re.sub(r"[^a-z0-9]+", "-", text)
    return text.strip("-") or "n-a"


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())
