"""An attacker who reads the publication and knows the perturbation table exactly (the strongest one).

Given published counts, each function returns what such an attacker concludes
about a withheld or hidden value: every value consistent with what was
published (the feasible set) and the most probable one (a uniform prior over
the unknowns). A value is "recovered with certainty" when the feasible set
has one element, and "recovered exactly" when the best guess is the truth.
"""

from lms_refresh.disclosure.cell_key import MODULUS


def noise_probabilities(table, count):
    """Return {noise: probability} of the perturbation table's row for a true count."""
    if table.off:
        return {0: 1.0}
    probabilities, previous = {}, 0
    for threshold, noise in table.row(count):
        probabilities[noise] = (threshold - previous) / MODULUS
        previous = threshold
    return probabilities


def likelihood(table, true, published):
    """The probability that a true count (>= k) is published as `published`."""
    return noise_probabilities(table, true).get(published - true, 0.0)


def _conclude(scores, truth):
    feasible = {value: score for value, score in scores.items() if score > 0}
    best = max(sorted(feasible), key=lambda value: feasible[value]) if feasible else None
    return {"feasible": sorted(feasible), "guess": best, "exact": best == truth, "certain": len(feasible) == 1}


def complement(table, published_total, published_part, candidates, truth):
    """The withheld rest = total - part (e.g. failed = completions - passed); `candidates` are its possible values."""
    spread = max(abs(noise) for noise in noise_probabilities(table, 10 ** 6))
    scores = {}
    for rest in candidates:
        score = 0.0
        for part in range(max(table.k, published_part - spread), published_part + spread + 1):
            score += likelihood(table, part, published_part) * likelihood(table, part + rest, published_total)
        scores[rest] = score
    return _conclude(scores, truth)


def threshold(table, published, own, candidates, truth):
    """The attacker added `own` to a cell and reads the others' count from its publication."""
    return _conclude({others: likelihood(table, others + own, published) if others + own >= table.k else 0.0
                      for others in candidates}, truth)
