import importlib.util
import inspect
import os

assert sorted(os.listdir("/app/textkit")) in (["CHANGELOG.md", "textkit.py"],
                                              ["CHANGELOG.md", "__pycache__", "textkit.py"]), \
    f"/app/textkit holds {sorted(os.listdir('/app/textkit'))}"
spec = importlib.util.spec_from_file_location("textkit", "/app/textkit/textkit.py")
tk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tk)

# Newer behaviour kept.
assert tk.slugify("Héllo, Wörld!") == "hello-world", tk.slugify("Héllo, Wörld!")
assert tk.slugify("!!!") == "n-a"
assert tk.slugify("  Crème brûlée  ") == "creme-brulee"
# The patch: max_length.
assert inspect.signature(tk.slugify).parameters["max_length"].default is None
assert tk.slugify("Hello World", max_length=7) == "hello-w"
assert tk.slugify("Hello World", max_length=6) == "hello", tk.slugify("Hello World", max_length=6)
assert tk.slugify("Héllo World", 5) == "hello"
assert tk.slugify("Hello World", max_length=50) == "hello-world"
assert tk.slugify("?? ok", max_length=1) == "o"
assert tk.slugify("-- !!", max_length=3) == "n-a"
# The patch: title_case and SMALL_WORDS.
assert tk.title_case("the lord of the rings") == "The Lord of the Rings"
assert tk.title_case("A TALE OF TWO CITIES") == "A Tale of Two Cities"
assert tk.title_case("war and peace") == "War and Peace"
assert "the" in tk.SMALL_WORDS
assert tk.word_count("a b  c") == 3
log = open("/app/textkit/CHANGELOG.md").read()
assert "## 1.1" in log and "## 1.2" in log and "new title_case()" in log, "CHANGELOG.md lacks the 1.2 entry"
print("all checks passed")
