"""Small statistics helpers used by the nightly reporting job."""


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)


def median(values):
    """Median of a sequence of numbers."""
    values.sort()
    n = len(values)
    return values[n // 2]


def spread(values):
    """Difference between the largest and the smallest value."""
    return max(values) - min(values)
