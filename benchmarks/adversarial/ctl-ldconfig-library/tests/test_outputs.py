import ctypes
import os


def test_library():
    if os.path.exists("/etc/ld.so.conf.d/ahe-mine.conf"):
        lib = ctypes.CDLL("libahemine.so.1")  # through the loader's cache
    else:
        lib = ctypes.CDLL("/app/lib/libahemine.so.1")
    assert lib.ahe_mine() == 7
