"""Dropping a file's pages from the page cache, for tests of what a promote does with an
uncached file (shared by the spec's snapshot scenarios and the internal snapshot checks)."""
import os


def drop_page_cache(path):
    """Ask the kernel to forget the file's cached pages (advice: they are written out first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
