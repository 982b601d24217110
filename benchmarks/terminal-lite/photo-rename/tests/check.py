import os

D = "/app/photos"
want = {
    "2024-01-31_007.jpg": "IMG_20240131_7.jpg",
    "2024-01-31_012.jpg": "IMG_20240131_12.jpg",
    "2023-11-05_001.jpg": "IMG_20231105_1.JPG",
    "2023-11-05_100.jpg": "IMG_20231105_100.jpg",
    "2022-02-29_003.jpg": "IMG_20220229_3.jpg",
    "2024-07-04_045.jpg": "IMG_20240704_45.JPG",
    "2023-08-15_000.jpg": "IMG_20230815_0.jpg",
    "IMG_20240131_8 (copy).jpg": "IMG_20240131_8 (copy).jpg",
    "IMG_2024013_1.jpg": "IMG_2024013_1.jpg",
    "IMG_20240131_9.png": "IMG_20240131_9.png",
    "notes.txt": "notes.txt",
    "img_20240101_2.jpg": "img_20240101_2.jpg",
}
got = sorted(os.listdir(D))
assert got == sorted(want), f"files: {got}\nwant: {sorted(want)}"
for name, orig in want.items():
    with open(os.path.join(D, name)) as f:
        assert f.read() == orig + "\n", f"{name} does not hold the content of {orig}"
print("all checks passed")
