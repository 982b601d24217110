"""Closed integer intervals (a, b) with a <= b."""


def merge(intervals):
    """Merges overlapping or touching intervals.

    Returns a new list of disjoint intervals sorted by start; (1, 3) and (3, 5) touch and
    merge into (1, 5), (1, 3) and (4, 5) do not. The input is not modified.
    """
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def total_length(intervals):
    """Total length covered by the intervals (overlaps counted once); (2, 5) has length 3."""
    return sum(b - a for a, b in merge(intervals))


def contains(intervals, x):
    """Whether x lies in one of the intervals (end points included)."""
    return any(a <= x <= b for a, b in intervals)
