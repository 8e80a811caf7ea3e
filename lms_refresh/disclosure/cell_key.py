"""The cell key method: record keys, cell keys and the fixed perturbation table.

The cell key method (Australian Bureau of Statistics' TableBuilder, UK ONS
2021 Census tables): every staged record carries a fixed random record key,
derived with the secret pseudonymisation key so that nobody who knows
statement ids or pseudonyms can compute it. A cell's key is the sum of its
records' keys modulo 2**32 (the method's "modulo 1" in integers), and a
fixed perturbation table maps (cell key, true count) to a bounded noise. The
same records always give the same published value; one record more or less
gives a fresh, unpredictable noise.
"""

import fractions
import hashlib

MODULUS = 2 ** 32


class RecordKeys:
    """Record keys derived with the secret key: one per event (by id), one per learner (by pseudonym)."""

    def __init__(self, key):
        self._key = hashlib.sha256(b"lms-refresh record keys\0" + key).digest()
        self._learners = {}

    def event(self, event_id):
        return int.from_bytes(hashlib.blake2b(bytes(event_id), key=self._key, digest_size=4,
                                              person=b"event").digest(), "big")

    def learner(self, actor):
        value = self._learners.get(actor)
        if value is None:
            data = int(actor).to_bytes(8, "big", signed=True)
            value = int.from_bytes(hashlib.blake2b(data, key=self._key, digest_size=4,
                                                   person=b"learner").digest(), "big")
            if len(self._learners) < 1_000_000:  # bounded: a learner's key is cheap to recompute
                self._learners[actor] = value
        return value

    def add(self, events):
        """Given staged event rows, return them with their record key and their learner's key appended."""
        return [event + (self.event(event.event_id), self.learner(event.actor)) for event in events]


def noise_bounds(max_noise):
    """Return the largest variance the table's shape allows for `max_noise` (its tails fall linearly)."""
    if max_noise == 0:
        return fractions.Fraction(0)
    tail = sum(max_noise + 1 - j for j in range(1, max_noise + 1))
    spread = sum(j * j * (max_noise + 1 - j) for j in range(1, max_noise + 1))
    return fractions.Fraction(spread, tail)


def base_distribution(max_noise, variance):
    """Return {noise: probability} over -D..D: zero mean, the given variance, tails falling linearly."""
    variance = fractions.Fraction(variance).limit_denominator(10 ** 6)
    if max_noise == 0 or variance == 0:
        return {0: fractions.Fraction(1)}
    spread = sum(j * j * (max_noise + 1 - j) for j in range(1, max_noise + 1))
    weight = variance / (2 * spread)
    table = {j: weight * (max_noise + 1 - abs(j)) for j in range(-max_noise, max_noise + 1) if j}
    table[0] = 1 - sum(table.values())
    if table[0] < 0:
        raise ValueError(f"a variance of {float(variance)} needs a larger max_noise")
    return dict(sorted(table.items()))


class PerturbationTable:
    """Map (cell key, true count) to a published count, for counts that passed the threshold."""

    def __init__(self, settings):
        self.k = settings.min_cell_size
        self.base = base_distribution(settings.max_noise, settings.variance)
        self.off = settings.method == "none"
        self._rows = {}

    def row(self, count):
        """Return [(cumulative threshold in 0..2**32, noise)] for a true count (>= k).

        Within D of the threshold the noise's downward part is cut at k (the rest of the
        row renormalised): no count is published below k, and a count of exactly k is not
        published exactly either (a zero-mean row there could only be "no noise", which
        would give the threshold attack its answer). Such counts are biased upwards by
        less than D/2; every count of at least k + D gets the zero-mean row.
        """
        reach = min(max(self.base), count - self.k)
        cached = self._rows.get(reach)
        if cached is None:
            kept = {j: p for j, p in self.base.items() if j >= -reach}
            total = sum(kept.values())
            cumulative, cached = fractions.Fraction(0), []
            for noise, probability in kept.items():
                cumulative += probability / total
                cached.append((int(cumulative * MODULUS), noise))
            self._rows[reach] = cached
        return cached

    def perturb(self, count, cell_key, column):
        """Return the published value of a count whose cell key is `cell_key`, in column `column`.

        The row is looked up at a position scrambled from (cell key, column): the same
        records give the same value, while one record more moves each column's noise
        independently (the raw key would move all columns of a cell together).
        """
        if self.off or count == 0:
            return count
        position = int.from_bytes(hashlib.blake2b(
            (cell_key % MODULUS).to_bytes(4, "big"), digest_size=4, person=column.encode()[:16]).digest(), "big")
        for threshold, noise in self.row(count):
            if position < threshold:
                return count + noise
        return count + self.row(count)[-1][1]
