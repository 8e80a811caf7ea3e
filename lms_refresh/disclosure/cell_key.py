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
    """Record keys derived with the secret key: one per event (by id), one per learner (by pseudonym).

    The mappers compute them as they map (in the parsing workers, for NDJSON files), so that the
    serial staging process does not. Each key is a keyed BLAKE2b hash; a copy of a hash already
    keyed gives the same digest as a new one, for about two thirds of the instructions.
    """

    def __init__(self, key):
        self._keyed(hashlib.sha256(b"lms-refresh record keys\0" + key).digest())

    def _keyed(self, derived):
        self._key = derived
        self._events = hashlib.blake2b(key=derived, digest_size=4, person=b"event")
        self._learners = _LearnerKeys(derived)

    def __reduce__(self):
        return _from_derived, (self._key,)  # a hash object cannot be pickled: it is keyed again

    def event(self, event_id):
        keyed = self._events.copy()
        keyed.update(event_id)  # bytes, or a store's memoryview of them: no copy needed to hash it
        return int.from_bytes(keyed.digest(), "big")

    def keyers(self):
        """(the function of an event's id, the function of its learner's pseudonym) that give its record keys."""
        return self.event, self._learners.__getitem__  # a known learner's key without a call of Python code

    def learner(self, actor):
        return self._learners[actor]


class _LearnerKeys(dict):
    """Learners' record keys by pseudonym, each computed the first time it is looked up."""

    def __init__(self, derived):
        super().__init__()
        self._key = derived

    def __missing__(self, actor):
        data = int(actor).to_bytes(8, "big", signed=True)
        value = int.from_bytes(hashlib.blake2b(data, key=self._key, digest_size=4, person=b"learner").digest(), "big")
        if len(self) < 1_000_000:  # bounded: a learner's key is cheap to recompute
            self[actor] = value
        return value


def _from_derived(derived):
    keys = RecordKeys.__new__(RecordKeys)
    keys._keyed(derived)
    return keys


class NoRecordKeys:
    """What a mapper built without the run's secret key gives its events (`check`, tests): no keys. The
    store refuses to stage such events."""

    @staticmethod
    def event(event_id):
        return None

    @staticmethod
    def learner(actor):
        return None

    @classmethod
    def keyers(cls):
        return cls.event, cls.learner


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
        self._base = None

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

    def magnitude(self, cell_key, column):
        """Return the noise, in units of the cell's largest record, added to a sum of values (scores, durations).

        Continuous: a noise drawn from the table's base row (zero mean, the configured variance, at most D either
        way) plus an even spread of half a unit either way, each at its own position scrambled from (cell key,
        column). A noise in whole units would keep the sum's fraction of a unit exact, and with it the value of
        a record of one learner among an attacker's own. As for counts, the same records give the same noise.
        """
        if self.off:
            return 0.0
        whole = _position(cell_key, column + " whole")
        noise = next((noise for threshold, noise in self._base_row() if whole < threshold), max(self.base))
        return noise + (_position(cell_key, column + " part") + 0.5) / MODULUS - 0.5

    def _base_row(self):
        if self._base is None:
            cumulative, self._base = fractions.Fraction(0), []
            for noise, probability in self.base.items():
                cumulative += probability
                self._base.append((int(cumulative * MODULUS), noise))
        return self._base

    def perturb(self, count, cell_key, column):
        """Return the published value of a count whose cell key is `cell_key`, in column `column`.

        The row is looked up at a position scrambled from (cell key, column): the same
        records give the same value, while one record more moves each column's noise
        independently (the raw key would move all columns of a cell together).
        """
        if self.off or count == 0:
            return count
        position = _position(cell_key, column)
        for threshold, noise in self.row(count):
            if position < threshold:
                return count + noise
        return count + self.row(count)[-1][1]


def _position(cell_key, column):
    """A position in 0 .. 2**32 - 1 scrambled from (cell key, column): each column's noise is drawn on its own."""
    return int.from_bytes(hashlib.blake2b(
        (cell_key % MODULUS).to_bytes(4, "big"), digest_size=4, person=column.encode()[:16]).digest(), "big")
